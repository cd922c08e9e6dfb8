import Foundation
import JSON
import LiveRelayCore
import Postgres

/// A live-activity target row (docs/glossary.md "target", §5).
public struct TargetRecord: Sendable, Equatable {
    public let tenantId: String
    public let id: String
    public let installationId: String
    public let startTargetId: String?
    public let createdByKeyId: String?
    /// `local` or `remote`.
    public let origin: String
    public let activityType: String
    public let templateVersion: String?
    public let businessKey: String?
    public let businessGeneration: String?
    public private(set) var status: TargetStatus
    public let endReason: String?
    public private(set) var revision: Int64
    public private(set) var state: JSONValue
    public private(set) var sourceVersion: Int64?
    public private(set) var staleAt: Date?
    public private(set) var relevanceScore: Double?
    /// The update push token (never returned or logged).
    public let pushToken: String?
    /// `pending`, `registered` or `invalid`.
    public let tokenStatus: String
    public let lastRenderReport: JSONValue?
    public private(set) var opSeq: Int64
    public let createdAt: Date
    public private(set) var updatedAt: Date
    public let startedAt: Date
    public let endedAt: Date?
    /// The channel this target is a member of (docs/channels.md), nil otherwise.
    public let channelId: String?
    /// `broadcast` or `fanout` for a channel member.
    public let delivery: String?
    /// Epoch milliseconds of the target's priority-10 sends in the last 60 minutes as last
    /// written (oldest first; older entries are dropped on the next send, so count with
    /// `PriorityBudget.sendsInWindow`). docs/priority-budget.md.
    public let priority10Sends: [Int64]
    /// The priority-10 budget that applies to the target now (tenant value or deployment
    /// default, frequent-updates aware); nil for Android targets, which have none.
    public let priority10Budget: Int?

    /// Coverage facts of this target (docs/credentials.md).
    public var ownership: TargetOwnership {
        TargetOwnership(targetId: id, startTargetId: startTargetId, createdByKeyId: createdByKeyId)
    }

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); installationId = try r.string("installation_id")
        startTargetId = try r.optionalString("start_target_id"); createdByKeyId = try r.optionalString("created_by_key_id")
        origin = try r.string("origin"); activityType = try r.string("activity_type"); templateVersion = try r.optionalString("template_version")
        businessKey = try r.optionalString("business_key"); businessGeneration = try r.optionalString("business_generation")
        status = try Self.status(r)
        endReason = try r.optionalString("end_reason"); revision = try r.int64("revision")
        state = try Self.state(r)
        sourceVersion = try r.optionalInt64("source_version"); staleAt = try r.optionalDate("stale_at")
        relevanceScore = try r.optionalDouble("relevance_score"); pushToken = try r.optionalString("push_token")
        tokenStatus = try r.string("token_status")
        lastRenderReport = try r.optionalString("last_render_report").flatMap { try? JSONValue.parse($0) }
        opSeq = try r.int64("op_seq"); createdAt = try r.date("created_at"); updatedAt = try r.date("updated_at")
        startedAt = try r.date("started_at"); endedAt = try r.optionalDate("ended_at")
        channelId = try r.optionalString("channel_id"); delivery = try r.optionalString("delivery")
        priority10Sends = try r.stringArray("priority10_sends").compactMap { Int64($0) }
        priority10Budget = try r.optionalInt("priority10_budget")
    }

    /// This row (as `lockTarget` read it, under the row lock of the same transaction) with the
    /// columns a write changed, from a row of `TargetStore.changedColumns`
    /// (docs/write-path.md "What a write returns").
    /// - Throws: `PostgresError(kind: .decoding)` for a missing or malformed column.
    /// `prefix`: the prefix of those columns' names (`TargetStore.changedColumns(prefix:)`).
    func applying(changed r: PostgresRow, prefix p: String = "") throws -> TargetRecord {
        var t = self
        t.status = try Self.status(r, p)
        t.revision = try r.int64(p + "revision"); t.state = try Self.state(r, p)
        t.sourceVersion = try r.optionalInt64(p + "source_version"); t.staleAt = try r.optionalDate(p + "stale_at")
        t.relevanceScore = try r.optionalDouble(p + "relevance_score")
        t.opSeq = try r.int64(p + "op_seq"); t.updatedAt = try r.date(p + "updated_at")
        return t
    }

    /// This row (as `lockTarget` read it, under the row lock of the same transaction) as `w`
    /// leaves it when its transaction's `now()` is `now` (`WritePath.lockTarget`'s
    /// `write_now`): the same values `applying(changed:)` decodes from the statement's
    /// `RETURNING`, timestamps rounded to microseconds as stored (`Date.postgresStored`).
    public func applying(_ w: TargetWrite, now: Date) -> TargetRecord {
        var t = self
        t.opSeq = opSeq + 1
        switch w {
        case .state(let revision, let state, let sourceVersion, let staleAt, let relevanceScore, let status):
            t.revision = revision; t.state = state
            t.sourceVersion = sourceVersion ?? self.sourceVersion
            t.staleAt = staleAt?.postgresStored ?? self.staleAt
            t.relevanceScore = relevanceScore ?? self.relevanceScore
            t.status = status ?? self.status
            t.updatedAt = now
        case .seq(let status):
            if let status { t.status = status; t.updatedAt = now }
        }
        return t
    }

    private static func status(_ r: PostgresRow, _ prefix: String = "") throws -> TargetStatus {
        guard let s = TargetStatus(rawValue: try r.string(prefix + "status")) else {
            throw PostgresError(kind: .decoding, message: "bad target status")
        }
        return s
    }

    private static func state(_ r: PostgresRow, _ prefix: String = "") throws -> JSONValue {
        try JSONValue.parse(Array(try r.string(prefix + "state").utf8), maxDepth: 128)
    }
}

/// Filters of listTargets (docs/endpoints.md).
public struct TargetFilter: Sendable {
    public var status: String?
    public var businessKey: String?
    public var installationId: String?
    public var startTargetId: String?
    /// Only members of this channel (`GET …/channels/{ch}/members`, docs/channels.md).
    public var channelId: String?
    /// For a sender key: only targets it covers (ids in `targets`, or started from
    /// `created_from` by `keyId`).
    public var coverage: SenderScope?
    public init(
        status: String? = nil, businessKey: String? = nil, installationId: String? = nil, startTargetId: String? = nil,
        channelId: String? = nil, coverage: SenderScope? = nil
    ) {
        self.status = status; self.businessKey = businessKey; self.installationId = installationId
        self.startTargetId = startTargetId; self.channelId = channelId; self.coverage = coverage
    }
}

/// SQL for targets.
public enum TargetStore {
    /// The columns a write of a locked target changes (`WritePath.applyState`, `bumpSeq`), which
    /// is all they return: `TargetRecord.applying(changed:)` takes the rest from the locked row.
    /// Returning `columns` evaluated its priority-budget subqueries (target_clocks,
    /// installations, tenants) a second time per write.
    static let changedColumns = changedColumns(prefix: "")

    /// `changedColumns` named `prefix` + name (for a row that holds other columns too).
    static func changedColumns(prefix p: String) -> String {
        "revision AS \(p)revision, state::text AS \(p)state, source_version AS \(p)source_version, stale_at AS \(p)stale_at, "
            + "relevance_score AS \(p)relevance_score, status AS \(p)status, op_seq AS \(p)op_seq, updated_at AS \(p)updated_at"
    }

    static let columns = """
        \(storedColumns(of: nil)), \(PriorityBudgetSQL.targetWindowColumn),
        \(PriorityBudgetSQL.targetBudgetColumn)
        """

    /// The columns of a `targets` row that `TargetRecord(row:)` reads, without the two
    /// priority-budget columns (`priority10_sends`, `priority10_budget`) that `columns` adds
    /// with subqueries: each qualified by `alias` when given, for a statement that joins the
    /// rows those columns come from instead (`WritePath.lockTarget`).
    static func storedColumns(of alias: String?) -> String {
        let t = alias.map { "\($0)." } ?? ""
        return """
            \(t)tenant_id, \(t)id, \(t)installation_id, \(t)start_target_id, \(t)created_by_key_id, \(t)origin, \(t)activity_type,
            \(t)template_version, \(t)business_key, \(t)business_generation, \(t)status, \(t)end_reason, \(t)revision,
            \(t)state::text AS state, \(t)source_version, \(t)stale_at, \(t)relevance_score, \(t)push_token, \(t)token_status,
            \(t)last_render_report::text AS last_render_report, \(t)op_seq, \(t)created_at, \(t)updated_at, \(t)started_at,
            \(t)ended_at, \(t)channel_id, \(t)delivery
            """
    }

    /// Target `id` of the tenant, optionally locked (`FOR UPDATE`: serialises writes per target).
    public static func get(_ c: PostgresConnection, tenantId: String, id: String, forUpdate: Bool = false) throws -> TargetRecord? {
        try c.query("SELECT \(columns) FROM targets WHERE tenant_id = $1 AND id = $2\(forUpdate ? " FOR UPDATE" : "")", [tenantId, id])
            .first.map(TargetRecord.init(row:))
    }

    /// The target holding (business_key, business_generation), if any.
    public static func byBusiness(_ c: PostgresConnection, tenantId: String, key: String, generation: String) throws -> TargetRecord? {
        try c.query(
            "SELECT \(columns) FROM targets WHERE tenant_id = $1 AND business_key = $2 AND business_generation = $3",
            [tenantId, key, generation]
        ).first.map(TargetRecord.init(row:))
    }

    /// Serialises reservations of one business instance for the rest of the transaction
    /// (`pg_advisory_xact_lock`), so concurrent starts on it create one target.
    public static func lockBusiness(_ c: PostgresConnection, tenantId: String, key: String, generation: String) throws {
        try c.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", ["\(tenantId)|\(key)|\(generation)"])
    }

    /// Fields of a new target.
    public struct New: Sendable {
        public var id: String, installationId: String, startTargetId: String?, createdByKeyId: String?, origin: String
        public var activityType: String, templateVersion: String?, businessKey: String?, businessGeneration: String?
        public var status: TargetStatus, state: JSONValue, sourceVersion: Int64?, staleAt: Date?, relevanceScore: Double?
        public var tokenStatus: String
        public init(
            id: String, installationId: String, startTargetId: String?, createdByKeyId: String?, origin: String,
            activityType: String, templateVersion: String?, businessKey: String?, businessGeneration: String?,
            status: TargetStatus, state: JSONValue, sourceVersion: Int64? = nil, staleAt: Date?, relevanceScore: Double?,
            tokenStatus: String
        ) {
            self.id = id; self.installationId = installationId; self.startTargetId = startTargetId; self.createdByKeyId = createdByKeyId
            self.origin = origin; self.activityType = activityType; self.templateVersion = templateVersion
            self.businessKey = businessKey; self.businessGeneration = businessGeneration; self.status = status; self.state = state
            self.sourceVersion = sourceVersion; self.staleAt = staleAt; self.relevanceScore = relevanceScore; self.tokenStatus = tokenStatus
        }
    }

    /// Inserts a target at revision 1.
    public static func insert(_ c: PostgresConnection, tenantId: String, _ n: New) throws -> TargetRecord {
        try TargetRecord(
            row: c.query(
                """
                INSERT INTO targets (tenant_id, id, installation_id, start_target_id, created_by_key_id, origin, activity_type,
                                     template_version, business_key, business_generation, status, revision, state, source_version,
                                     stale_at, relevance_score, token_status)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, $12::jsonb, $13, $14, $15, $16)
                RETURNING \(columns)
                """,
                [
                    tenantId, n.id, n.installationId, n.startTargetId, n.createdByKeyId, n.origin, n.activityType, n.templateVersion,
                    n.businessKey, n.businessGeneration, n.status.rawValue, n.state.jsonString, n.sourceVersion, n.staleAt,
                    n.relevanceScore, n.tokenStatus
                ])[0])
    }

    /// Commits a state-bearing write: new revision and full snapshot (docs/write-semantics.md "Every
    /// state-bearing write carries its own full committed snapshot and gets revision +1").
    public static func applyState(
        _ c: PostgresConnection, tenantId: String, id: String, revision: Int64, state: JSONValue,
        sourceVersion: Int64?, staleAt: Date?, relevanceScore: Double?, status: TargetStatus?
    ) throws {
        try c.execute(
            """
            UPDATE targets SET revision = $3, state = $4::jsonb, source_version = COALESCE($5, source_version),
                   stale_at = COALESCE($6, stale_at), relevance_score = COALESCE($7, relevance_score),
                   status = COALESCE($8, status), updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            """, [tenantId, id, revision, state.jsonString, sourceVersion, staleAt, relevanceScore, status?.rawValue])
    }

    /// The next operation sequence number of the target (call with the row locked).
    public static func nextSeq(_ c: PostgresConnection, tenantId: String, id: String) throws -> Int64 {
        try c.query("UPDATE targets SET op_seq = op_seq + 1 WHERE tenant_id = $1 AND id = $2 RETURNING op_seq", [tenantId, id])[0].int64("op_seq")
    }

    /// Sets status (and, when ending, the reason and end time).
    public static func setStatus(_ c: PostgresConnection, tenantId: String, id: String, status: TargetStatus, endReason: String? = nil) throws {
        try c.execute(
            """
            UPDATE targets SET status = $3::text, end_reason = COALESCE($4, end_reason),
                   ended_at = CASE WHEN $3 IN ('ended', 'creation_failed') THEN COALESCE(ended_at, now()) ELSE ended_at END,
                   updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            """, [tenantId, id, status.rawValue, endReason])
    }

    /// Registers a (rotated) update push token; a waiting target becomes `ready`.
    public static func setPushToken(_ c: PostgresConnection, tenantId: String, id: String, token: String) throws -> TargetRecord {
        try TargetRecord(
            row: c.query(
                """
                UPDATE targets SET push_token = $3, token_status = 'registered',
                       status = CASE WHEN status IN ('reserved', 'starting', 'token_pending', 'start_unknown') THEN 'ready' ELSE status END,
                       updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
                """, [tenantId, id, token])[0])
    }

    /// Targets matching `filter`, id order, keyset-paginated.
    public static func list(_ c: PostgresConnection, tenantId: String, filter: TargetFilter, limit: Int, after: String?) throws -> Page<TargetRecord>
    {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("id > ?", ifPresent: after)
        w.add("status = ?", ifPresent: filter.status)
        w.add("business_key = ?", ifPresent: filter.businessKey)
        w.add("installation_id = ?", ifPresent: filter.installationId)
        w.add("start_target_id = ?", ifPresent: filter.startTargetId)
        w.add("channel_id = ?", ifPresent: filter.channelId)
        if let cov = filter.coverage {
            w.add(
                "(id = ANY(?::text[]) OR (start_target_id = ANY(?::text[]) AND created_by_key_id = ?))",
                PostgresTextArray(Array(cov.targets)), PostgresTextArray(Array(cov.createdFrom)), cov.keyId)
        }
        let rows = try c.query("SELECT \(columns) FROM targets WHERE \(w.clause) ORDER BY id LIMIT \(w.bind(limit + 1))", w.params)
            .map(TargetRecord.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }

    /// The pinned schema of template version `id` of the installation (nil: none declared
    /// or unknown version).
    public static func templateSchema(_ c: PostgresConnection, tenantId: String, installationId: String, templateVersion: String) throws -> JSONValue?
    {
        guard
            let text = try c.query(
                """
                SELECT schema::text AS schema FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 AND id = $3 LIMIT 1
                """, [tenantId, installationId, templateVersion]
            ).first?.optionalString("schema")
        else { return nil }
        return try JSONValue.parse(text, maxDepth: 128)
    }
}
