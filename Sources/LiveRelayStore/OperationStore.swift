import Foundation
import JSON
import LiveRelayCore
import Postgres

/// An operation row: one accepted write and its delivery status (docs/write-semantics.md "Operation").
public struct OperationRecord: Sendable, Equatable {
    public let tenantId: String
    public let id: String
    public let targetId: String
    public let seq: Int64
    public let kind: PushEvent
    public let status: OperationStatus
    public let pendingReason: String?
    public let revision: Int64
    public let hasState: Bool
    public let state: JSONValue?
    public let alert: PushAlert?
    public let staleAt: Date?
    public let relevanceScore: Double?
    /// The priority the write asked for (`priority`, default 10).
    public let priority: Int
    /// The priority its push was (or is being) sent at when that differs from `priority`: a
    /// budget downgrade (docs/priority-budget.md); nil when sent as requested or not yet sent.
    public let sentPriority: Int?
    public let expiresAt: Date?
    public let dismissAt: Date?
    public let supersededBy: String?
    public let apnsId: String?
    /// `{code, message, provider_status, provider_reason}` when failed.
    public let failure: JSONValue?
    public let consumesQuota: Bool
    public let quotaDay: String?
    public let createdByKeyId: String?
    public let attempts: Int
    public let createdAt: Date
    public let updatedAt: Date
    public let acceptedAt: Date?

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); targetId = try r.string("target_id"); seq = try r.int64("seq")
        guard let k = PushEvent(rawValue: try r.string("kind")), let s = OperationStatus(rawValue: try r.string("status")) else {
            throw PostgresError(kind: .decoding, message: "bad operation kind/status")
        }
        kind = k; status = s
        pendingReason = try r.optionalString("pending_reason"); revision = try r.int64("revision"); hasState = try r.bool("has_state")
        state = try r.optionalString("state").map { try JSONValue.parse($0, maxDepth: 128) }
        alert = try r.optionalString("alert").flatMap(PushAlert.init(jsonText:))
        staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score"); priority = try r.int("priority")
        sentPriority = try r.optionalInt("sent_priority")
        expiresAt = try r.optionalDate("expires_at"); dismissAt = try r.optionalDate("dismiss_at")
        supersededBy = try r.optionalString("superseded_by"); apnsId = try r.optionalString("apns_id")
        failure = try r.optionalString("failure").flatMap { try? JSONValue.parse($0) }
        consumesQuota = try r.bool("consumes_quota"); quotaDay = try r.optionalString("quota_day")
        createdByKeyId = try r.optionalString("created_by_key_id"); attempts = try r.int("attempts")
        createdAt = try r.date("created_at"); updatedAt = try r.date("updated_at"); acceptedAt = try r.optionalDate("accepted_at")
    }

    /// The row `OperationStore.insertStatement` writes for `n` in a transaction whose `now()`
    /// is `now`: the same values `init(row:)` decodes from its `RETURNING` (docs/write-path.md
    /// "The response before round trip 2"), timestamps rounded to microseconds as stored.
    init(inserted n: OperationStore.New, tenantId: String, now: Date) {
        self.tenantId = tenantId; id = n.id; targetId = n.targetId; seq = n.seq; kind = n.kind; status = n.status
        pendingReason = n.pendingReason; revision = n.revision; hasState = n.state != nil; state = n.state; alert = n.alert
        staleAt = n.options.staleAt?.postgresStored; relevanceScore = n.options.relevanceScore; priority = n.options.priority
        sentPriority = nil; expiresAt = n.options.expiresAt?.postgresStored; dismissAt = n.dismissAt?.postgresStored
        supersededBy = nil; apnsId = nil; failure = nil; consumesQuota = n.consumesQuota; quotaDay = n.quotaDay
        createdByKeyId = n.createdByKeyId; attempts = 0; createdAt = now; updatedAt = now; acceptedAt = nil
    }

    /// Whether the operation carries an explicit alert.
    public var hasAlert: Bool { alert != nil }

    /// The priority the operation is (or was last) sent at: `sentPriority`, else `priority`.
    public var effectivePriority: Int { sentPriority ?? priority }

    /// True when the priority budget lowered the operation's priority (docs/priority-budget.md).
    public var priorityDowngraded: Bool { effectivePriority < priority }
}

/// SQL for operations and the dispatch queue they form.
public enum OperationStore {
    static let columns = """
        tenant_id, id, target_id, seq, kind, status, pending_reason, revision, has_state, state::text AS state, alert::text AS alert,
        stale_at, relevance_score, priority, expires_at, dismiss_at, superseded_by, apns_id, failure::text AS failure,
        consumes_quota, quota_day::text AS quota_day, created_by_key_id, attempts, created_at, updated_at, accepted_at, sent_priority
        """

    /// The channel that wakes dispatchers when work is queued (payload: tenant id).
    public static let dispatchChannel = "liverelay_dispatch"
    /// The channel announcing that an operation finished (payload: operation id) or that a
    /// target changed status (payload: target id), for `wait_ms` and `wait_until_ready_ms`.
    public static let eventsChannel = "liverelay_events"

    /// Fields of a new operation.
    public struct New: Sendable {
        public var id: String, targetId: String, seq: Int64, kind: PushEvent, status: OperationStatus, pendingReason: String?
        public var revision: Int64, state: JSONValue?, alert: PushAlert?, options: WriteOptions, dismissAt: Date?
        public var consumesQuota: Bool, quotaDay: String?, createdByKeyId: String?, idempotencyKey: String?
        public init(
            id: String, targetId: String, seq: Int64, kind: PushEvent, status: OperationStatus = .queued, pendingReason: String? = nil,
            revision: Int64, state: JSONValue?, alert: PushAlert?, options: WriteOptions, dismissAt: Date? = nil,
            consumesQuota: Bool, quotaDay: String?, createdByKeyId: String?, idempotencyKey: String?
        ) {
            self.id = id; self.targetId = targetId; self.seq = seq; self.kind = kind; self.status = status; self.pendingReason = pendingReason
            self.revision = revision; self.state = state; self.alert = alert; self.options = options; self.dismissAt = dismissAt
            self.consumesQuota = consumesQuota; self.quotaDay = quotaDay; self.createdByKeyId = createdByKeyId; self.idempotencyKey = idempotencyKey
        }

        /// The operation record `insertStatement` stores for this operation of `tenantId` when
        /// its transaction's `now()` is `now`, known before the statement runs (docs/write-path.md
        /// "The response before round trip 2").
        public func record(tenantId: String, now: Date) -> OperationRecord {
            OperationRecord(inserted: self, tenantId: tenantId, now: now)
        }
    }

    /// Inserts an operation; a queued one also wakes the dispatchers (NOTIFY `<tenant>:<operation>`,
    /// delivered on commit; docs/delivery.md "Wake-ups").
    public static func insert(_ c: PostgresConnection, tenantId: String, _ n: New) throws -> OperationRecord {
        let rec = try OperationRecord(row: c.query(insertStatement(tenantId: tenantId, n))[0])
        if n.status == .queued { try c.notify(dispatchChannel, payload: tenantId + ":" + n.id) }
        return rec
    }

    /// The INSERT of `insert`, without its NOTIFY (for pipelines, see `WritePath`); with
    /// `returning` (the default) it returns the row (`columns`), else nothing.
    public static func insertStatement(tenantId: String, _ n: New, returning: Bool = true) -> PostgresStatement {
        let alert: String? = n.alert.map { a in
            var o: [String: JSONValue] = ["title": .string(a.title), "body": .string(a.body)]
            if let s = a.sound { o["sound"] = .string(s) }
            return JSONValue.object(o).jsonString
        }
        return PostgresStatement(
            returning ? insertReturningSQL : insertSQL,
            [
                tenantId, n.id, n.targetId, n.seq, n.kind.rawValue, n.status.rawValue, n.pendingReason, n.revision, n.state != nil,
                n.state?.jsonString, alert, n.options.staleAt, n.options.relevanceScore, n.options.priority, n.options.expiresAt,
                n.dismissAt, n.consumesQuota, n.quotaDay, n.createdByKeyId, n.idempotencyKey
            ])
    }

    /// `insertStatement`'s SQL without and with RETURNING.
    static let insertSQL = """
        INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, pending_reason, revision, has_state, state, alert,
                                stale_at, relevance_score, priority, expires_at, dismiss_at, consumes_quota, quota_day,
                                created_by_key_id, idempotency_key)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, $12, $13, $14, $15, $16, $17, $18::date, $19, $20)
        """
    static let insertReturningSQL = insertSQL + "\nRETURNING " + columns

    /// The target's queued (not yet sending) operations, oldest first, locked.
    public static func queued(_ c: PostgresConnection, tenantId: String, targetId: String) throws -> [OperationRecord] {
        try c.query(
            """
            SELECT \(columns) FROM operations WHERE tenant_id = $1 AND target_id = $2 AND status = 'queued' ORDER BY seq FOR UPDATE
            """, [tenantId, targetId]
        ).map(OperationRecord.init(row:))
    }

    /// Marks `ids` superseded by `by` (which releases their quota reservations, see `QuotaStore`).
    public static func supersede(_ c: PostgresConnection, tenantId: String, ids: [String], by: String) throws {
        guard !ids.isEmpty else { return }
        try c.execute(
            """
            UPDATE operations SET status = 'superseded', superseded_by = $3, updated_at = now()
             WHERE tenant_id = $1 AND id = ANY($2::text[]) AND status = 'queued'
            """, [tenantId, PostgresTextArray(ids), by])
        for id in ids { try c.notify(eventsChannel, payload: id) }
    }

    /// Cancels every queued operation of the target (local end, creation failure, expiry,
    /// retirement), which releases their quota (see `QuotaStore`). Returns how many.
    @discardableResult
    public static func cancelQueued(_ c: PostgresConnection, tenantId: String, targetId: String, reason: String) throws -> Int {
        let rows = try c.query(
            """
            UPDATE operations SET status = 'cancelled', pending_reason = $3, updated_at = now()
             WHERE tenant_id = $1 AND target_id = $2 AND status = 'queued'
            RETURNING id, consumes_quota, quota_day::text AS quota_day
            """, [tenantId, targetId, reason])
        for r in rows { try c.notify(eventsChannel, payload: try r.string("id")) }
        return rows.count
    }

    /// Operation `id` of the tenant.
    public static func get(_ c: PostgresConnection, tenantId: String, id: String) throws -> OperationRecord? {
        try c.query("SELECT \(columns) FROM operations WHERE tenant_id = $1 AND id = $2", [tenantId, id]).first.map(OperationRecord.init(row:))
    }

    /// The target's operations newest first, keyset-paginated by id.
    public static func listForTarget(
        _ c: PostgresConnection, tenantId: String, targetId: String, limit: Int, before: String?
    ) throws -> Page<OperationRecord> {
        try Page.descendingById(
            c, table: "operations", columns: columns, tenantId: tenantId, parentColumn: "target_id", parentId: targetId,
            before: before, limit: limit, id: \.id, decode: OperationRecord.init(row:))
    }
}

/// Daily push quota per tenant: reserve at commit, consume on provider acceptance, release on
/// superseded/cancelled/failed/expired (docs/write-path.md "Quota"). Days are UTC dates
/// (`YYYY-MM-DD`).
///
/// The counters are `push_quota` rows, `shards` per (tenant, day), kept exact by statement-level
/// triggers on `operations` (migration 0008): whichever code inserts an operation or changes its
/// status, the trigger adds the change to the session's shard row (`pg_backend_pid() % 64`).
/// `reserved` = state-bearing operations of the day `queued`/`sending`; `used` = those
/// `accepted`/`unknown`. So `reserve`, `release` and `consume` have nothing left to write, and a
/// quota check reads at most `shards` rows, whatever the backlog.
///
/// Exactness under concurrency (`check`): a transaction that reserved holds its shard row's lock
/// until it ends, so at most `shards − 1` other uncommitted reservations exist at any moment.
/// Far from the limit (`fastPathAllows`) that bound is enough; near it, `lockAll` locks every
/// shard row in shard order (waiting out every uncommitted reservation) and reads the exact sum.
/// The bound assumes one reservation per transaction: code that queues many state-bearing
/// operations in one transaction must use `lockAll` first.
public enum QuotaStore {
    /// Number of counter rows per (tenant, day) (migration 0008's `pg_backend_pid() % 64`).
    public static let shards = 64

    /// The UTC date of `now` as `YYYY-MM-DD`.
    public static func day(_ now: Date) -> String { String(Timestamp.format(now).prefix(10)) }

    /// One statement reading the tenant's `daily_push_quota` (`limit`) and the day's committed
    /// `reserved`/`used` sums, columns `quota_limit`, `reserved`, `used` (bigint). Parameters:
    /// tenant id, day. Both sums come from one pass over the day's shard rows (the rows are
    /// rewritten by every reservation, so each pass walks their dead versions too).
    public static let readSQL = """
        SELECT t.daily_push_quota AS quota_limit, COALESCE(q.reserved, 0)::bigint AS reserved, COALESCE(q.used, 0)::bigint AS used
          FROM tenants t,
               LATERAL (SELECT sum(reserved) AS reserved, sum(used) AS used FROM push_quota WHERE tenant_id = $1 AND day = $2::date) q
         WHERE t.tenant_id = $1
        """

    /// (limit, reserved, used) from a row of `readSQL` or `lockAllSQL`.
    public static func decode(_ r: PostgresRow) throws -> (limit: Int64, reserved: Int64, used: Int64) {
        (try r.int64("quota_limit"), try r.int64("reserved"), try r.int64("used"))
    }

    /// Whether a reservation whose own unit is already counted in `reserved + used` (read after
    /// the reserving statement, in the same transaction) is safe without locking: even if every
    /// other shard holds an uncommitted reservation the day stays within `limit`.
    public static func fastPathAllows(limit: Int64, reserved: Int64, used: Int64) -> Bool {
        reserved + used + Int64(shards - 1) <= limit
    }

    /// Whether a reading leaves the day far enough from its limit for a write to skip the read
    /// of round trip 1 and rely on the re-read after reserving (`QuotaHints`): reserved and used
    /// units, with two units per shard of room, at most half of the limit.
    public static func farFromLimit(limit: Int64, reserved: Int64, used: Int64) -> Bool {
        reserved + used + 2 * Int64(shards) <= limit / 2
    }

    /// Whether a read taken BEFORE reserving leaves room to try the fast path (else lock).
    public static func worthFastPath(limit: Int64, reserved: Int64, used: Int64) -> Bool {
        reserved + used + Int64(shards) <= limit
    }

    /// Statement 1 of the exact path: makes every shard row of the day exist (so none can appear
    /// unlocked later). Parameters: tenant id, day. Run before `lockAllSQL`, as its own statement.
    public static let ensureShardsSQL = """
        INSERT INTO push_quota (tenant_id, day, shard, reserved, used)
        SELECT $1, $2::date, g, 0, 0 FROM generate_series(0, \(shards - 1)) g
        ON CONFLICT (tenant_id, day, shard) DO NOTHING
        """

    /// Statement 2 of the exact path: locks every shard row of the day in shard order (waiting
    /// for every uncommitted reservation) and returns the exact sums as `readSQL` does.
    public static let lockAllSQL = """
        WITH locked AS (SELECT reserved, used FROM push_quota WHERE tenant_id = $1 AND day = $2::date ORDER BY shard FOR UPDATE)
        SELECT (SELECT daily_push_quota FROM tenants WHERE tenant_id = $1) AS quota_limit,
               COALESCE(sum(reserved), 0)::bigint AS reserved, COALESCE(sum(used), 0)::bigint AS used FROM locked
        """

    /// Adds parameter 3 (bigint; negative releases) to `reserved` of the session's shard row
    /// (`lr_quota_shard()`) of tenant parameter 1's day parameter 2, as the quota triggers do:
    /// the statement of a writer that keeps its own counting (migration 0041, docs/write-path.md
    /// "Quota kept by the writer"). It locks the shard row until the transaction ends, as a
    /// trigger's reservation does.
    public static let adjustReservedSQL = """
        INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used) VALUES ($1, $2::date, lr_quota_shard(), $3, 0)
        ON CONFLICT (tenant_id, day, shard) DO UPDATE SET reserved = q.reserved + EXCLUDED.reserved
        """

    /// (reserved, used) of the tenant's day, committed values.
    public static func usage(_ c: PostgresConnection, tenantId: String, day: String) throws -> (reserved: Int64, used: Int64) {
        let r = try c.query(readSQL, [tenantId, day])
        guard let row = r.first else { return (0, 0) }
        let u = try decode(row)
        return (u.reserved, u.used)
    }

    /// Locks the day's counters and returns the exact (limit, reserved, used): two statements.
    public static func lockAll(_ c: PostgresConnection, tenantId: String, day: String) throws -> (limit: Int64, reserved: Int64, used: Int64) {
        let out = try c.pipeline([PostgresStatement(ensureShardsSQL, [tenantId, day]), PostgresStatement(lockAllSQL, [tenantId, day])]).get()
        return try decode(out[1].rows[0])
    }

    /// Reserving is inserting the state-bearing operation (the trigger counts it): nothing to do.
    public static func reserve(_ c: PostgresConnection, tenantId: String, day: String) throws {}

    /// Releasing is the operation leaving `queued`/`sending` (the trigger counts it): nothing to do.
    public static func release(_ c: PostgresConnection, tenantId: String, day: String, count: Int64 = 1) throws {}

    /// Consuming is the operation becoming `accepted`/`unknown` (the trigger counts it in the
    /// same statement): nothing to do. Kept so callers need not know the bookkeeping.
    public static func consume(_ c: PostgresConnection, tenantId: String, day: String, count: Int64 = 1) throws {}
}
