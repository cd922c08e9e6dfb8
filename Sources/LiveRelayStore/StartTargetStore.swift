import Foundation
import Postgres

/// A start target row (docs/glossary.md): binding + activity type + current template version +
/// push-to-start token. `pending` until it can be started remotely, then `ready`; `retired`
/// with its binding or installation.
public struct StartTargetRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let id: String
    public let installationId: String
    public let bindingId: String
    public let activityType: String
    public let currentTemplateVersion: String
    /// The iOS push-to-start token (never returned or logged; see `tokenFingerprint`).
    public let pushToStartToken: String?
    /// `pending`, `ready` or `retired`.
    public let status: String
    public let createdAt: Date
    public let updatedAt: Date
}

/// SQL for start targets.
public enum StartTargetStore {
    static let columns = """
        tenant_id, id, installation_id, binding_id, activity_type, current_template_version, push_to_start_token, status,
        created_at, updated_at
        """

    /// Start target `id` of the tenant, optionally locked.
    public static func get(_ c: PostgresConnection, tenantId: String, id: String, forUpdate: Bool = false) throws -> StartTargetRecord? {
        try c.query("SELECT \(columns) FROM start_targets WHERE tenant_id = $1 AND id = $2\(forUpdate ? " FOR UPDATE" : "")", [tenantId, id])
            .first.map(StartTargetRecord.init(row:))
    }

    /// The start target of (installation, binding, activity type), locked for update.
    public static func find(
        _ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String,
        activityType: String
    ) throws -> StartTargetRecord? {
        try c.query(
            """
            SELECT \(columns) FROM start_targets
             WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND activity_type = $4 FOR UPDATE
            """, [tenantId, installationId, bindingId, activityType]
        ).first.map(StartTargetRecord.init(row:))
    }

    /// How many of the installation's start targets are not retired (what
    /// `TenantLimits.maxStartTargetsPerInstallation` bounds); no row locked. Consistent when the
    /// caller holds the installation's row lock, as every prepare does (the only path that
    /// inserts start targets).
    public static func countActive(_ c: PostgresConnection, tenantId: String, installationId: String) throws -> Int {
        try c.query(
            "SELECT count(*) AS n FROM start_targets WHERE tenant_id = $1 AND installation_id = $2 AND status <> 'retired'",
            [tenantId, installationId])[0].int("n")
    }

    /// Inserts a new start target.
    public static func insert(
        _ c: PostgresConnection, tenantId: String, id: String, installationId: String, bindingId: String,
        activityType: String, templateVersion: String, status: String, now: Date
    ) throws -> StartTargetRecord {
        try StartTargetRecord(
            row: c.query(
                """
                INSERT INTO start_targets (tenant_id, id, installation_id, binding_id, activity_type, current_template_version, status,
                                           created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8::timestamptz, $8::timestamptz) RETURNING \(columns)
                """, [tenantId, id, installationId, bindingId, activityType, templateVersion, status, now])[0])
    }

    /// Moves the start target to `templateVersion` (its token and status stay: iOS
    /// push-to-start tokens are per activity type, not per template).
    public static func setCurrentVersion(
        _ c: PostgresConnection, tenantId: String, id: String, templateVersion: String,
        now: Date
    ) throws -> StartTargetRecord {
        try StartTargetRecord(
            row: c.query(
                """
                UPDATE start_targets SET current_template_version = $3, updated_at = $4::timestamptz
                 WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
                """, [tenantId, id, templateVersion, now])[0])
    }

    /// Stores the push-to-start token; the start target becomes `ready` (unless retired).
    public static func setPushToStartToken(
        _ c: PostgresConnection, tenantId: String, id: String, token: String, now: Date
    ) throws -> StartTargetRecord {
        try StartTargetRecord(
            row: c.query(
                """
                UPDATE start_targets SET push_to_start_token = $3, status = CASE WHEN status = 'retired' THEN status ELSE 'ready' END,
                       updated_at = $4::timestamptz
                 WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
                """, [tenantId, id, token, now])[0])
    }

    /// docs/providers.md: an Android start target is `ready` exactly while its installation has an FCM
    /// token. Brings every non-retired start target of an Android installation in line
    /// (pending → ready when a token is set, ready → pending when it is cleared); no-op on iOS.
    /// Call after changing `installations.fcm_token`, in the same transaction.
    /// Returns how many start targets changed.
    @discardableResult
    public static func refreshAndroidReadiness(_ c: PostgresConnection, tenantId: String, installationId: String) throws -> Int {
        try c.execute(
            """
            UPDATE start_targets st
               SET status = CASE WHEN i.fcm_token IS NULL THEN 'pending' ELSE 'ready' END, updated_at = now()
              FROM installations i
             WHERE st.tenant_id = $1 AND st.installation_id = $2 AND st.status <> 'retired'
               AND i.tenant_id = st.tenant_id AND i.id = st.installation_id AND i.platform = 'android'
               AND st.status <> CASE WHEN i.fcm_token IS NULL THEN 'pending' ELSE 'ready' END
            """, [tenantId, installationId])
    }
}
