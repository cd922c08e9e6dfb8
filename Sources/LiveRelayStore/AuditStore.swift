import Foundation
import JSON
import LiveRelayCore
import Postgres

/// One admin action (docs/endpoints.md `GET /v1/audit-events`): who (key id), what, on which object,
/// when, and the request id. Never holds a secret.
public struct AuditEvent: Sendable, Equatable {
    public let id: String
    public let actorId: String
    public let action: String
    public let objectType: String
    public let objectId: String?
    public let requestId: String
    public let details: JSONValue
    public let createdAt: Date

    init(row r: PostgresRow) throws {
        id = try r.string("id"); actorId = try r.string("actor_id"); action = try r.string("action")
        objectType = try r.string("object_type"); objectId = try r.optionalString("object_id")
        requestId = try r.string("request_id"); createdAt = try r.date("created_at")
        details = (try? JSONValue.parse(Array(try r.string("details").utf8))) ?? .object([:])
    }
}

/// SQL for the audit trail.
public enum AuditStore {
    /// Records an admin action in the caller's transaction (so it exists exactly when the action does).
    public static func record(
        _ c: PostgresConnection, tenantId: String, actorId: String, action: String, objectType: String,
        objectId: String?, requestId: String, details: [String: JSONValue] = [:]
    ) throws {
        try c.execute(
            """
            INSERT INTO audit_events (tenant_id, id, actor_id, action, object_type, object_id, request_id, details)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
            """,
            [
                tenantId, Identifier.make(.auditEvent), actorId, action, objectType, objectId, requestId,
                JSONValue.object(details).jsonString
            ])
    }

    /// Events newest first, keyset-paginated (`before` = id of the last event of the previous page).
    public static func list(_ c: PostgresConnection, tenantId: String, limit: Int, before: String?) throws -> Page<AuditEvent> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("id < ?", ifPresent: before)
        let rows = try c.query(
            """
            SELECT id, actor_id, action, object_type, object_id, request_id, details::text AS details, created_at
              FROM audit_events WHERE \(w.clause) ORDER BY id DESC LIMIT \(w.bind(limit + 1))
            """, w.params
        ).map(AuditEvent.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }
}
