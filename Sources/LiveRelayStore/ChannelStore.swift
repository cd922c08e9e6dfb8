import Foundation
import JSON
import LiveRelayCore
import Postgres

/// A channel row (docs/channels.md).
public struct ChannelRecord: Sendable, Equatable {
    public let tenantId: String
    public let id: String
    public let appId: String
    public let environment: String
    public let activityType: String
    public let attributesType: String
    public let schema: JSONValue?
    /// `none` or `most_recent`.
    public let storagePolicy: String
    public let label: String
    public let apnsChannelId: String
    /// `active`, `ending` or `ended`.
    public let status: String
    /// `sender` or `channel_invalid` once ended.
    public let endReason: String?
    public let revision: Int64
    public let state: JSONValue?
    public let staleAt: Date?
    public let relevanceScore: Double?
    public let opSeq: Int64
    public let membersBroadcast: Int64
    public let membersFanout: Int64
    public let membersEnded: Int64
    public let createdByKeyId: String?
    public let createdAt: Date
    public let updatedAt: Date
    public let endedAt: Date?

    /// `ending` or `ended`: the channel takes no more writes or members (`409 CHANNEL_ENDED`).
    public var refusesWrites: Bool { status != "active" }

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); appId = try r.string("app_id")
        environment = try r.string("environment"); activityType = try r.string("activity_type")
        attributesType = try r.string("attributes_type")
        schema = try r.optionalString("schema").map { try JSONValue.parse($0, maxDepth: 128) }
        storagePolicy = try r.string("storage_policy"); label = try r.string("label"); apnsChannelId = try r.string("apns_channel_id")
        status = try r.string("status"); endReason = try r.optionalString("end_reason"); revision = try r.int64("revision")
        state = try r.optionalString("state").map { try JSONValue.parse($0, maxDepth: 128) }
        staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score"); opSeq = try r.int64("op_seq")
        membersBroadcast = try r.int64("members_broadcast"); membersFanout = try r.int64("members_fanout")
        membersEnded = try r.int64("members_ended"); createdByKeyId = try r.optionalString("created_by_key_id")
        createdAt = try r.date("created_at"); updatedAt = try r.date("updated_at"); endedAt = try r.optionalDate("ended_at")
    }
}

/// A channel operation row: one accepted channel write with its broadcast and fan-out progress.
public struct ChannelOperationRecord: Sendable, Equatable {
    public let tenantId: String
    public let id: String
    public let channelId: String
    public let seq: Int64
    public let kind: PushEvent
    public let revision: Int64
    public let hasState: Bool
    public let state: JSONValue?
    public let alert: PushAlert?
    public let staleAt: Date?
    public let relevanceScore: Double?
    public let priority: Int
    public let expiresAt: Date?
    public let dismissAt: Date?
    public let supersededBy: String?
    public let broadcastStatus: BroadcastStatus?
    public let broadcastAttempts: Int
    public let broadcastTimestamp: Int64?
    public let apnsRequestId: String?
    public let apnsUniqueId: String?
    public let broadcastFailure: JSONValue?
    public let fanoutDone: Bool
    public let fanoutCursor: String?
    public let consumesQuota: Bool
    public let quotaDay: String?
    public let createdAt: Date
    public let updatedAt: Date

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); channelId = try r.string("channel_id"); seq = try r.int64("seq")
        guard let k = PushEvent(rawValue: try r.string("kind")) else { throw PostgresError(kind: .decoding, message: "bad channel operation kind") }
        kind = k
        revision = try r.int64("revision"); hasState = try r.bool("has_state")
        state = try r.optionalString("state").map { try JSONValue.parse($0, maxDepth: 128) }
        alert = try r.optionalString("alert").flatMap(PushAlert.init(jsonText:))
        staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score")
        priority = try r.int("priority"); expiresAt = try r.optionalDate("expires_at"); dismissAt = try r.optionalDate("dismiss_at")
        supersededBy = try r.optionalString("superseded_by")
        broadcastStatus = try r.optionalString("broadcast_status").flatMap(BroadcastStatus.init(rawValue:))
        broadcastAttempts = try r.int("broadcast_attempts"); broadcastTimestamp = try r.optionalInt64("broadcast_timestamp")
        apnsRequestId = try r.optionalString("apns_request_id"); apnsUniqueId = try r.optionalString("apns_unique_id")
        broadcastFailure = try r.optionalString("broadcast_failure").flatMap { try? JSONValue.parse($0) }
        fanoutDone = try r.string("fanout_state") == "done"; fanoutCursor = try r.optionalString("fanout_cursor")
        consumesQuota = try r.bool("consumes_quota"); quotaDay = try r.optionalString("quota_day")
        createdAt = try r.date("created_at"); updatedAt = try r.date("updated_at")
    }

    /// The facts the fan-out planner needs.
    public var facts: ChannelWriteFacts { ChannelWriteFacts(id: id, seq: seq, kind: kind, hasAlert: alert != nil) }
}

/// Per-target operations of one channel operation by status (its `fanout` counts).
public struct FanoutCounts: Sendable, Equatable {
    public var byStatus: [String: Int64] = [:]
    public init(byStatus: [String: Int64] = [:]) { self.byStatus = byStatus }
    /// All per-target operations of the channel operation.
    public var members: Int64 { byStatus.values.reduce(0, +) }
    public func count(_ s: String) -> Int64 { byStatus[s] ?? 0 }
}

/// SQL for channels and channel operations (docs/channels.md). Every statement filters by
/// `tenant_id`; row-level security is the second wall.
public enum ChannelStore {
    static let columns = """
        tenant_id, id, app_id, environment, activity_type, attributes_type, schema::text AS schema, storage_policy, label,
        apns_channel_id, status, end_reason, revision, state::text AS state, stale_at, relevance_score, op_seq,
        members_broadcast, members_fanout, members_ended, created_by_key_id, created_at, updated_at, ended_at
        """
    static let opColumns = """
        tenant_id, id, channel_id, seq, kind, revision, has_state, state::text AS state, alert::text AS alert, stale_at,
        relevance_score, priority, expires_at, dismiss_at, superseded_by, broadcast_status, broadcast_attempts, broadcast_timestamp,
        apns_request_id, apns_unique_id, broadcast_failure::text AS broadcast_failure, fanout_state, fanout_cursor,
        consumes_quota, quota_day::text AS quota_day, created_at, updated_at
        """

    /// Wakes the fan-out expander and the broadcaster (payload: `<tenant>:<channel operation>`).
    public static let channelsChannel = "liverelay_channels"

    // MARK: channels

    /// Serialises channel creation per (tenant, app, environment) for the rest of the
    /// transaction and returns how many channels are active there (counted up to `cap + 1`).
    public static func lockAndCountActive(_ c: PostgresConnection, tenantId: String, appId: String, environment: String, cap: Int) throws -> Int {
        try c.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 15))", ["\(tenantId)|\(appId)|\(environment)|channels"])
        return try c.query(
            """
            SELECT count(*) AS n FROM (SELECT 1 FROM channels WHERE tenant_id = $1 AND app_id = $2 AND environment = $3 AND status = 'active'
                                        LIMIT $4) x
            """, [tenantId, appId, environment, cap + 1])[0].int("n")
    }

    /// Inserts a channel (status `active`, revision 0, no state).
    public static func insert(
        _ c: PostgresConnection, tenantId: String, id: String, _ r: ChannelCreateRequest, apnsChannelId: String,
        createdByKeyId: String?
    ) throws -> ChannelRecord {
        try ChannelRecord(
            row: c.query(
                """
                INSERT INTO channels (tenant_id, id, app_id, environment, activity_type, attributes_type, schema, storage_policy, label,
                                      apns_channel_id, created_by_key_id)
                VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11)
                RETURNING \(columns)
                """,
                [
                    tenantId, id, r.appId, r.environment, r.activityType, r.attributesType, r.schema?.jsonString, r.storagePolicy, r.label,
                    apnsChannelId, createdByKeyId
                ])[0])
    }

    /// Whether a channel of tenant `tenantId` names APNs channel `apnsChannelId` (the check
    /// before deleting the APNs channel of a creation that may not have committed,
    /// docs/channels.md "Resources").
    /// - Throws: `PostgresError`.
    public static func namesAPNsChannel(_ c: PostgresConnection, tenantId: String, apnsChannelId: String) throws -> Bool {
        try !c.query("SELECT 1 AS one FROM channels WHERE tenant_id = $1 AND apns_channel_id = $2 LIMIT 1", [tenantId, apnsChannelId]).isEmpty
    }

    /// Channel `id` of the tenant; `lock`: `FOR UPDATE` (writes), `FOR SHARE` (joins) or none.
    public static func get(_ c: PostgresConnection, tenantId: String, id: String, lock: String = "") throws -> ChannelRecord? {
        try c.query(
            "SELECT \(columns) FROM channels WHERE tenant_id = $1 AND id = $2 \(lock == "update" ? "FOR UPDATE" : lock == "share" ? "FOR SHARE" : "")",
            [tenantId, id]
        ).first.map(ChannelRecord.init(row:))
    }

    /// The tenant's channels in id order (keyset); `only`: restrict to these ids (a sender key's `targets`).
    public static func list(_ c: PostgresConnection, tenantId: String, only: [String]?, limit: Int, after: String?) throws -> Page<ChannelRecord> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("id > ?", ifPresent: after)
        if let only { w.add("id = ANY(?::text[])", PostgresTextArray(only)) }
        let rows = try c.query("SELECT \(columns) FROM channels WHERE \(w.clause) ORDER BY id LIMIT \(w.bind(limit + 1))", w.params)
            .map(ChannelRecord.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }

    /// Commits a channel write on the locked channel: the next seq, optionally new state and
    /// revision, optionally a new status. Returns the row.
    public static func applyWrite(
        _ c: PostgresConnection, tenantId: String, id: String, revision: Int64, state: JSONValue?,
        staleAt: Date?, relevanceScore: Double?, status: String?
    ) throws -> ChannelRecord {
        try ChannelRecord(
            row: c.query(
                """
                UPDATE channels SET op_seq = op_seq + 1, revision = $3, state = COALESCE($4::jsonb, state),
                       stale_at = COALESCE($5, stale_at), relevance_score = COALESCE($6, relevance_score),
                       status = COALESCE($7, status), updated_at = now()
                 WHERE tenant_id = $1 AND id = $2
                RETURNING \(columns)
                """, [tenantId, id, revision, state?.jsonString, staleAt, relevanceScore, status])[0])
    }

    // MARK: channel operations

    /// Fields of a new channel operation.
    public struct NewOperation: Sendable {
        public var id: String, channelId: String, seq: Int64, kind: PushEvent, revision: Int64, state: JSONValue?, alert: PushAlert?
        public var options: WriteOptions, dismissAt: Date?, consumesQuota: Bool, quotaDay: String?, createdByKeyId: String?
        public var idempotencyKey: String
        public init(
            id: String, channelId: String, seq: Int64, kind: PushEvent, revision: Int64, state: JSONValue?, alert: PushAlert?,
            options: WriteOptions, dismissAt: Date?, consumesQuota: Bool, quotaDay: String?, createdByKeyId: String?,
            idempotencyKey: String
        ) {
            self.id = id; self.channelId = channelId; self.seq = seq; self.kind = kind; self.revision = revision; self.state = state
            self.alert = alert; self.options = options; self.dismissAt = dismissAt; self.consumesQuota = consumesQuota
            self.quotaDay = quotaDay; self.createdByKeyId = createdByKeyId; self.idempotencyKey = idempotencyKey
        }
    }

    /// Inserts a channel operation with its broadcast `queued` and fan-out `pending`, and wakes
    /// the expander and broadcaster on commit. A state-bearing one (`consumesQuota` with a
    /// `quotaDay`) reserves its broadcast's quota unit until the broadcast finishes
    /// (`quota_held`, migration 0037; docs/channels.md "Quota").
    public static func insertOperation(_ c: PostgresConnection, tenantId: String, _ n: NewOperation) throws -> ChannelOperationRecord {
        let alert = n.alert?.jsonText
        let rec = try ChannelOperationRecord(
            row: c.query(
                """
                INSERT INTO channel_operations (tenant_id, id, channel_id, seq, kind, revision, has_state, state, alert, stale_at, relevance_score,
                                                priority, expires_at, dismiss_at, broadcast_status, consumes_quota, quota_day, created_by_key_id,
                                                idempotency_key, quota_held)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11, $12, $13, $14, 'queued', $15, $16::date, $17, $18,
                        CASE WHEN $15 AND $16::date IS NOT NULL THEN 1 ELSE 0 END)
                RETURNING \(opColumns)
                """,
                [
                    tenantId, n.id, n.channelId, n.seq, n.kind.rawValue, n.revision, n.state != nil, n.state?.jsonString, alert,
                    n.options.staleAt, n.options.relevanceScore, n.options.priority, n.options.expiresAt, n.dismissAt, n.consumesQuota,
                    n.quotaDay, n.createdByKeyId, n.idempotencyKey
                ])[0])
        try c.notify(channelsChannel, payload: tenantId + ":" + n.id)
        return rec
    }

    /// The channel's queued (not yet sending) broadcasts, locked: what a new write may supersede.
    public static func queuedBroadcasts(_ c: PostgresConnection, tenantId: String, channelId: String) throws -> [ChannelWriteFacts] {
        try c.query(
            """
            SELECT id, seq, kind, alert IS NOT NULL AS has_alert FROM channel_operations
             WHERE tenant_id = $1 AND channel_id = $2 AND broadcast_status = 'queued' ORDER BY seq FOR UPDATE
            """, [tenantId, channelId]
        ).map { r in
            ChannelWriteFacts(
                id: try r.string("id"), seq: try r.int64("seq"), kind: PushEvent(rawValue: try r.string("kind")) ?? .update,
                hasAlert: try r.bool("has_alert"))
        }
    }

    /// Marks the broadcasts of `ids` superseded by `by` (their fan-out is covered by `by`'s:
    /// the expander always sends each member the newest write plus every alert).
    public static func supersedeBroadcasts(_ c: PostgresConnection, tenantId: String, ids: [String], by: String) throws {
        guard !ids.isEmpty else { return }
        try c.execute(
            """
            UPDATE channel_operations SET broadcast_status = 'superseded', superseded_by = $3, updated_at = now()
             WHERE tenant_id = $1 AND id = ANY($2::text[]) AND broadcast_status = 'queued'
            """, [tenantId, PostgresTextArray(ids), by])
    }

    /// Channel operation `id` of the tenant.
    public static func getOperation(_ c: PostgresConnection, tenantId: String, id: String) throws -> ChannelOperationRecord? {
        try c.query("SELECT \(opColumns) FROM channel_operations WHERE tenant_id = $1 AND id = $2", [tenantId, id])
            .first.map(ChannelOperationRecord.init(row:))
    }

    /// The channel's operations newest first (keyset by id).
    public static func listOperations(
        _ c: PostgresConnection, tenantId: String, channelId: String, limit: Int, before: String?
    ) throws -> Page<ChannelOperationRecord> {
        try Page.descendingById(
            c, table: "channel_operations", columns: opColumns, tenantId: tenantId, parentColumn: "channel_id", parentId: channelId,
            before: before, limit: limit, id: \.id, decode: ChannelOperationRecord.init(row:))
    }

    /// The per-target operations of each of `ids` by status (the channel operations' `fanout` counts).
    public static func fanoutCounts(_ c: PostgresConnection, tenantId: String, ids: [String]) throws -> [String: FanoutCounts] {
        guard !ids.isEmpty else { return [:] }
        var out: [String: FanoutCounts] = [:]
        for r in try c.query(
            """
            SELECT channel_operation_id AS id, status, count(*) AS n FROM operations
             WHERE tenant_id = $1 AND channel_operation_id = ANY($2::text[]) GROUP BY 1, 2
            """, [tenantId, PostgresTextArray(ids)])
        {
            out[try r.string("id"), default: FanoutCounts()].byStatus[try r.string("status")] = try r.int64("n")
        }
        return out
    }
}

/// What joining a channel needs to know (docs/channels.md "Joining a channel").
public struct ChannelJoinFacts: Sendable {
    /// The channel, locked `FOR SHARE` (a concurrent channel end waits for the join, and the
    /// join sees the end once committed).
    public let channel: ChannelRecord
    /// The joining installation's `environment`, `platform` and reported `os_version` (nil when
    /// it never reported one).
    public let environment: String
    public let platform: String
    public let osVersion: String?
}

extension ChannelStore {
    /// The channel `channelId` (locked `FOR SHARE`) and the installation's facts; nil when the
    /// channel is not the tenant's. `os_version` is read through `to_jsonb` so this works
    /// whichever migration added the column.
    public static func joinFacts(_ c: PostgresConnection, tenantId: String, channelId: String, installationId: String) throws -> ChannelJoinFacts? {
        guard let ch = try get(c, tenantId: tenantId, id: channelId, lock: "share") else { return nil }
        guard
            let r = try c.query(
                """
                SELECT environment, platform, to_jsonb(i) ->> 'os_version' AS os_version FROM installations i WHERE tenant_id = $1 AND id = $2
                """, [tenantId, installationId]
            ).first
        else { return nil }
        return ChannelJoinFacts(
            channel: ch, environment: try r.string("environment"), platform: try r.string("platform"),
            osVersion: try r.optionalString("os_version"))
    }

    /// Makes target `targetId` (just inserted in this transaction) a member of `channelId` with
    /// `delivery`, having seen the channel's writes up to `channelSeq`; `ready`: the target is
    /// `ready` at once (a local start into a channel). Returns the target row.
    public static func joinStatement(
        tenantId: String, targetId: String, channelId: String, delivery: String, channelSeq: Int64,
        ready: Bool
    ) -> PostgresStatement {
        PostgresStatement(
            """
            UPDATE targets SET channel_id = $3, delivery = $4, channel_seq = $5,
                   status = CASE WHEN $6::boolean THEN 'ready' ELSE status END, updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            RETURNING \(TargetStore.columns)
            """, [tenantId, targetId, channelId, delivery, channelSeq, ready])
    }
}

extension ChannelStore {
    /// The `attributes_type` of template version `templateVersion` of the installation (nil: unknown version).
    public static func templateAttributesType(
        _ c: PostgresConnection, tenantId: String, installationId: String, templateVersion: String
    ) throws -> String? {
        try c.query(
            "SELECT attributes_type FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 AND id = $3 LIMIT 1",
            [tenantId, installationId, templateVersion]
        ).first?.string("attributes_type")
    }
}
