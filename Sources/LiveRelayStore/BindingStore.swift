import Foundation
import Postgres

/// A binding row (docs/glossary.md): a stable identity of one render script / widget family inside an
/// installation; its id is chosen by the device.
public struct BindingRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let installationId: String
    public let id: String
    /// `active` or `retired` (a retired binding never comes back, docs/endpoints.md "script deleted/replaced").
    public let status: String
    public let createdAt: Date
    public let retiredAt: Date?
}

/// SQL for bindings.
public enum BindingStore {
    static let columns = "tenant_id, installation_id, id, status, created_at, retired_at"

    /// The binding, created active when absent, locked for update (serialises prepares and GC
    /// of one binding). Returns the row and whether it was created now.
    public static func upsertLocked(
        _ c: PostgresConnection, tenantId: String, installationId: String, id: String
    ) throws -> (BindingRecord, created: Bool) {
        let inserted = try c.query(
            """
            INSERT INTO bindings (tenant_id, installation_id, id) VALUES ($1, $2, $3)
            ON CONFLICT (tenant_id, installation_id, id) DO NOTHING RETURNING \(columns)
            """, [tenantId, installationId, id])
        if let row = inserted.first { return (try BindingRecord(row: row), true) }
        guard let existing = try get(c, tenantId: tenantId, installationId: installationId, id: id, forUpdate: true) else {
            throw PostgresError(kind: .query, message: "binding vanished during upsert")
        }
        return (existing, false)
    }

    /// Binding `id` of the installation, optionally locked.
    public static func get(
        _ c: PostgresConnection, tenantId: String, installationId: String, id: String, forUpdate: Bool = false
    ) throws -> BindingRecord? {
        try c.query(
            """
            SELECT \(columns) FROM bindings WHERE tenant_id = $1 AND installation_id = $2 AND id = $3\(forUpdate ? " FOR UPDATE" : "")
            """, [tenantId, installationId, id]
        ).first.map(BindingRecord.init(row:))
    }

    /// Retires the binding and its start targets (idempotent): every start target of the
    /// binding becomes `retired`, and the versions they had as current are released now
    /// (`template_versions.released_at`, the start of their 7-day retention unless something
    /// else still pins them). Returns the binding and the ids of its start targets.
    public static func retire(
        _ c: PostgresConnection, tenantId: String, installationId: String, id: String,
        now: Date
    ) throws -> (BindingRecord, startTargetIds: [String])? {
        guard try get(c, tenantId: tenantId, installationId: installationId, id: id, forUpdate: true) != nil else { return nil }
        let b = try BindingRecord(
            row: c.query(
                """
                UPDATE bindings SET status = 'retired', retired_at = COALESCE(retired_at, $4::timestamptz)
                 WHERE tenant_id = $1 AND installation_id = $2 AND id = $3 RETURNING \(columns)
                """, [tenantId, installationId, id, now])[0])
        let released = try c.query(
            """
            UPDATE start_targets SET status = 'retired', updated_at = $4::timestamptz
             WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND status <> 'retired'
            RETURNING current_template_version
            """, [tenantId, installationId, id, now]
        ).map { try $0.string("current_template_version") }
        for tv in released {
            try TemplateStore.release(c, tenantId: tenantId, installationId: installationId, bindingId: id, id: tv, at: now)
        }
        let ids = try c.query(
            """
            SELECT id FROM start_targets WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 ORDER BY id
            """, [tenantId, installationId, id]
        ).map { try $0.string("id") }
        return (b, ids)
    }
}
