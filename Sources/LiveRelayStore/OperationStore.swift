import Foundation
import JSON
import LiveRelayCore
import Postgres

/// An operation row: one accepted write and its delivery status (SPEC §5 "Operation").
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
    public let priority: Int
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
        alert = try r.optionalString("alert").flatMap { text -> PushAlert? in
            guard let o = try? JSONValue.parse(text), let t = o["title"]?.stringValue, let b = o["body"]?.stringValue else { return nil }
            return PushAlert(title: t, body: b, sound: o["sound"]?.stringValue)
        }
        staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score"); priority = try r.int("priority")
        expiresAt = try r.optionalDate("expires_at"); dismissAt = try r.optionalDate("dismiss_at")
        supersededBy = try r.optionalString("superseded_by"); apnsId = try r.optionalString("apns_id")
        failure = try r.optionalString("failure").flatMap { try? JSONValue.parse($0) }
        consumesQuota = try r.bool("consumes_quota"); quotaDay = try r.optionalString("quota_day")
        createdByKeyId = try r.optionalString("created_by_key_id"); attempts = try r.int("attempts")
        createdAt = try r.date("created_at"); updatedAt = try r.date("updated_at"); acceptedAt = try r.optionalDate("accepted_at")
    }

    /// Whether the operation carries an explicit alert.
    public var hasAlert: Bool { alert != nil }
}

/// SQL for operations and the dispatch queue they form.
public enum OperationStore {
    static let columns = """
        tenant_id, id, target_id, seq, kind, status, pending_reason, revision, has_state, state::text AS state, alert::text AS alert,
        stale_at, relevance_score, priority, expires_at, dismiss_at, superseded_by, apns_id, failure::text AS failure,
        consumes_quota, quota_day::text AS quota_day, created_by_key_id, attempts, created_at, updated_at, accepted_at
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
        public init(id: String, targetId: String, seq: Int64, kind: PushEvent, status: OperationStatus = .queued, pendingReason: String? = nil,
                    revision: Int64, state: JSONValue?, alert: PushAlert?, options: WriteOptions, dismissAt: Date? = nil,
                    consumesQuota: Bool, quotaDay: String?, createdByKeyId: String?, idempotencyKey: String?) {
            self.id = id; self.targetId = targetId; self.seq = seq; self.kind = kind; self.status = status; self.pendingReason = pendingReason
            self.revision = revision; self.state = state; self.alert = alert; self.options = options; self.dismissAt = dismissAt
            self.consumesQuota = consumesQuota; self.quotaDay = quotaDay; self.createdByKeyId = createdByKeyId; self.idempotencyKey = idempotencyKey
        }
    }

    /// Inserts an operation; a queued one also wakes the dispatchers (NOTIFY `<tenant>:<operation>`,
    /// delivered on commit; docs/delivery.md "Wake-ups").
    public static func insert(_ c: PostgresConnection, tenantId: String, _ n: New) throws -> OperationRecord {
        let alert: String? = n.alert.map { a in
            var o: [String: JSONValue] = ["title": .string(a.title), "body": .string(a.body)]
            if let s = a.sound { o["sound"] = .string(s) }
            return JSONValue.object(o).jsonString
        }
        let rec = try OperationRecord(row: c.query("""
            INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, pending_reason, revision, has_state, state, alert,
                                    stale_at, relevance_score, priority, expires_at, dismiss_at, consumes_quota, quota_day,
                                    created_by_key_id, idempotency_key)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, $12, $13, $14, $15, $16, $17, $18::date, $19, $20)
            RETURNING \(columns)
            """,
            [tenantId, n.id, n.targetId, n.seq, n.kind.rawValue, n.status.rawValue, n.pendingReason, n.revision, n.state != nil,
             n.state?.jsonString, alert, n.options.staleAt, n.options.relevanceScore, n.options.priority, n.options.expiresAt,
             n.dismissAt, n.consumesQuota, n.quotaDay, n.createdByKeyId, n.idempotencyKey])[0])
        if n.status == .queued { try c.notify(dispatchChannel, payload: tenantId + ":" + n.id) }
        return rec
    }

    /// The target's queued (not yet sending) operations, oldest first, locked.
    public static func queued(_ c: PostgresConnection, tenantId: String, targetId: String) throws -> [OperationRecord] {
        try c.query("""
            SELECT \(columns) FROM operations WHERE tenant_id = $1 AND target_id = $2 AND status = 'queued' ORDER BY seq FOR UPDATE
            """, [tenantId, targetId]).map(OperationRecord.init(row:))
    }

    /// Marks `ids` superseded by `by` (which releases their quota reservations, see `QuotaStore`).
    public static func supersede(_ c: PostgresConnection, tenantId: String, ids: [String], by: String) throws {
        guard !ids.isEmpty else { return }
        try c.execute("""
            UPDATE operations SET status = 'superseded', superseded_by = $3, updated_at = now()
             WHERE tenant_id = $1 AND id = ANY($2::text[]) AND status = 'queued'
            """, [tenantId, PostgresTextArray(ids), by])
        for id in ids { try c.notify(eventsChannel, payload: id) }
    }

    /// Cancels every queued operation of the target (local end, creation failure, expiry,
    /// retirement), which releases their quota (see `QuotaStore`). Returns how many.
    @discardableResult
    public static func cancelQueued(_ c: PostgresConnection, tenantId: String, targetId: String, reason: String) throws -> Int {
        let rows = try c.query("""
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
    public static func listForTarget(_ c: PostgresConnection, tenantId: String, targetId: String, limit: Int, before: String?) throws -> Page<OperationRecord> {
        let rows = try c.query("""
            SELECT \(columns) FROM operations WHERE tenant_id = $1 AND target_id = $2 AND ($3::text IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4
            """, [tenantId, targetId, before, limit + 1]).map(OperationRecord.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }
}

/// Daily push quota per tenant (SPEC §5 "Quota"): reserve at commit, consume on provider
/// acceptance, release on superseded/cancelled/failed/expired. Days are UTC dates (`YYYY-MM-DD`).
///
/// A reservation is the operation row itself: reserved = the day's state-bearing operations
/// still `queued` or `sending`. The dispatcher counts a unit used on acceptance and on an
/// unknown outcome (it may have reached the device). Superseding, cancelling, failing or expiring an operation therefore
/// releases its unit with no extra write, and writes never lock a shared counter row.
/// Used units are counted in 16 shard rows per (tenant, day) (migration 0003). The limit check
/// reads without locking: under concurrency a day may overshoot its quota by at most the
/// number of writes committing at that instant.
public enum QuotaStore {
    /// Number of counter rows per (tenant, day).
    public static let shards = 16

    /// The UTC date of `now` as `YYYY-MM-DD`.
    public static func day(_ now: Date) -> String { String(Timestamp.format(now).prefix(10)) }

    /// (reserved, used) of the tenant's day.
    public static func usage(_ c: PostgresConnection, tenantId: String, day: String) throws -> (reserved: Int64, used: Int64) {
        let r = try c.query("""
            SELECT (SELECT count(*) FROM operations WHERE tenant_id = $1 AND quota_day = $2::date AND consumes_quota
                       AND status IN ('queued', 'sending'))::bigint AS reserved,
                   (SELECT COALESCE(sum(used), 0) FROM push_quota WHERE tenant_id = $1 AND day = $2::date)::bigint AS used
            """, [tenantId, day])[0]
        return (try r.int64("reserved"), try r.int64("used"))
    }

    /// Reserving is inserting the state-bearing operation (see the type documentation): nothing to do.
    public static func reserve(_ c: PostgresConnection, tenantId: String, day: String) throws {}

    /// Releasing is the operation leaving `queued`/`sending`/`unknown`: nothing to do.
    public static func release(_ c: PostgresConnection, tenantId: String, day: String, count: Int64 = 1) throws {}

    /// Counts `count` used units (the provider accepted the pushes); call in the transaction
    /// that marks the operations `accepted`.
    public static func consume(_ c: PostgresConnection, tenantId: String, day: String, count: Int64 = 1) throws {
        try c.execute("""
            INSERT INTO push_quota (tenant_id, day, shard, used) VALUES ($1, $2::date, $3, $4)
            ON CONFLICT (tenant_id, day, shard) DO UPDATE SET used = push_quota.used + EXCLUDED.used
            """, [tenantId, day, Int.random(in: 0..<shards), count])
    }
}
