import Foundation
import JSON
import LiveRelayCore
import Postgres

/// One event of the events API (docs/webhooks.md "Events"): `data` is `{"object": …}`, the
/// object as the API showed it when the change happened (never business state nor tokens).
public struct EventRecord: Sendable, Equatable {
    public let id: String
    public let type: String
    public let targetId: String?
    public let channelId: String?
    public let data: JSONValue
    public let createdAt: Date

    init(row r: PostgresRow) throws {
        id = try r.string("id"); type = try r.string("type"); targetId = try r.optionalString("target_id")
        channelId = try r.optionalString("channel_id"); createdAt = try r.date("created_at")
        data = (try? JSONValue.parse(Array(try r.string("data").utf8))) ?? .object([:])
    }

    /// The event object: `{id, object: "event", type, created_at, data}` (also the webhook body).
    public var json: JSONValue {
        .object([
            "id": .string(id), "object": "event", "type": .string(type),
            "created_at": .string(Timestamp.format(createdAt)), "data": data
        ])
    }
}

/// Filters of `GET /v1/events`.
public struct EventFilter: Sendable, Equatable {
    public var type: String?
    public var targetId: String?
    public var channelId: String?
    public init(type: String? = nil, targetId: String? = nil, channelId: String? = nil) {
        self.type = type; self.targetId = targetId; self.channelId = channelId
    }
}

/// SQL for events. Status changes of operations, targets, start targets and installations are
/// recorded by triggers (migration 0012) in the transaction that makes them; `record` is the one
/// application-side insertion, for events that are not a status change (quota.exhausted,
/// webhook.test; channel.ended later). Either way the `events_fanout` trigger queues the
/// deliveries in the same transaction.
public enum EventStore {
    /// How long events are listed and kept (30 days), seconds.
    public static let retentionSeconds: Double = 30 * 24 * 3600

    /// Inserts one event in the caller's transaction, so it exists exactly when the change it
    /// reports does. `object` is the API object; `dedupeKey` makes the insertion a no-op when an
    /// event with the same key exists for the tenant. Returns the event, or nil when deduplicated.
    @discardableResult
    public static func record(
        _ c: PostgresConnection, tenantId: String, type: EventType, object: JSONValue,
        targetId: String? = nil, channelId: String? = nil, dedupeKey: String? = nil
    ) throws -> EventRecord? {
        try c.query(
            """
            INSERT INTO events (tenant_id, id, type, target_id, channel_id, dedupe_key, data)
            VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT DO NOTHING
            RETURNING id, type, target_id, channel_id, data::text AS data, created_at
            """,
            [
                tenantId, Identifier.make(.auditEvent), type.rawValue, targetId, channelId, dedupeKey,
                JSONValue.object(["object": object]).jsonString
            ]
        ).first.map(EventRecord.init(row:))
    }

    /// `quota.exhausted`, once per tenant and UTC day: call right after reserving a unit of
    /// `day`'s quota (same transaction) with the counts after the reservation. Records the event
    /// when nothing remains (`used + reserved >= limit`); the quota object is the usage object.
    public static func quotaReserved(
        _ c: PostgresConnection, tenantId: String, day: String, limit: Int64, used: Int64,
        reserved: Int64, resetsAt: Date
    ) throws {
        guard used + reserved >= limit else { return }
        try record(
            c, tenantId: tenantId, type: .quotaExhausted,
            object: [
                "object": "quota", "day": .string(day), "limit": .int(limit), "used": .int(used),
                "reserved": .int(reserved), "remaining": 0, "resets_at": .string(Timestamp.format(resetsAt))
            ],
            dedupeKey: "quota.exhausted:\(day)")
    }

    static let columns = "id, type, target_id, channel_id, data::text AS data, created_at"

    /// Events of the last 30 days (relative to `now`), newest first, keyset-paginated
    /// (`before` = id of the last event of the previous page).
    public static func list(
        _ c: PostgresConnection, tenantId: String, filter: EventFilter, now: Date, limit: Int,
        before: String?
    ) throws -> Page<EventRecord> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("created_at >= ?", now.addingTimeInterval(-retentionSeconds))
        w.add("id < ?", ifPresent: before)
        w.add("type = ?", ifPresent: filter.type)
        w.add("target_id = ?", ifPresent: filter.targetId)
        w.add("channel_id = ?", ifPresent: filter.channelId)
        let rows = try c.query("SELECT \(columns) FROM events WHERE \(w.clause) ORDER BY id DESC LIMIT \(w.bind(limit + 1))", w.params)
            .map(EventRecord.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }

    /// One event of the last 30 days, or nil.
    public static func get(_ c: PostgresConnection, tenantId: String, id: String, now: Date) throws -> EventRecord? {
        try c.query(
            "SELECT \(columns) FROM events WHERE tenant_id = $1 AND id = $2 AND created_at >= $3",
            [tenantId, id, now.addingTimeInterval(-retentionSeconds)]
        ).first.map(EventRecord.init(row:))
    }

    /// Deletes up to `batch` events made more than 30 days before `now` (system scope; their
    /// deliveries go with them), and delivery-log entries older than 30 days. Returns how many
    /// events went. Events are found by id, not `created_at` (which has no index since
    /// migration 0034, docs/webhooks.md "Retention"): an event id starts with the Unix
    /// milliseconds of its making, so each tenant's events below `idFloor(cutoff)` are a
    /// primary-key range. Fair across tenants: each tenant offers at most its share of `batch`
    /// (`batch` / tenants, at least 100) of its oldest, taken round robin (every tenant's
    /// oldest before any tenant's second), so a tenant with a large backlog of old events
    /// cannot take every pass's batch while another tenant's expired events wait. The walk goes
    /// through `tenants`, so it relies on every event's tenant existing there: no foreign key
    /// says so since migration 0036; tenants are never deleted, and every event is written for
    /// the tenant of a row keyed to `tenants` or of an authenticated request.
    public static func purgeExpired(_ c: PostgresConnection, now: Date, batch: Int = 5000) throws -> Int {
        let cutoff = now.addingTimeInterval(-retentionSeconds)
        try c.execute(
            """
            DELETE FROM webhook_attempts WHERE (tenant_id, endpoint_id, id) IN (
              SELECT tenant_id, endpoint_id, id FROM webhook_attempts WHERE delivered_at < $1 LIMIT $2)
            """, [cutoff, batch])
        let tenants = try c.query("SELECT count(*) AS n FROM tenants")[0].int("n")
        return try c.execute(
            """
            DELETE FROM events WHERE (tenant_id, id) IN (
              SELECT e.tenant_id, e.id FROM tenants t CROSS JOIN LATERAL (
                     SELECT e.tenant_id, e.id, row_number() OVER (ORDER BY e.id) AS rn FROM events e
                      WHERE e.tenant_id = t.tenant_id AND e.id < $1 ORDER BY e.id LIMIT $3) e
               ORDER BY e.rn, substr(e.id, 5) LIMIT $2)
            """, [idFloor(cutoff), batch, max(100, batch / max(1, tenants))])
    }

    /// The lowest possible event id of the millisecond of `date`: `evt_` and the first 10
    /// characters of `Identifier.lowerBound` (2 zero bits and the 48 millisecond bits). Every
    /// event made in an earlier millisecond sorts below it (ids compare bytewise, `COLLATE
    /// "C"`), every event of that millisecond or later above it.
    public static func idFloor(_ date: Date) -> String {
        String(Identifier.lowerBound(.auditEvent, at: date).prefix(IdKind.auditEvent.rawValue.count + 1 + 10))
    }
}
