import Foundation
import Postgres

/// An installation row (docs/glossary.md: one install of the tenant's app on one device).
public struct InstallationRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let id: String
    public let publishableKeyId: String
    public let appId: String
    /// `ios` or `android`.
    public let platform: String
    /// `sandbox` or `production` (APNs environment).
    public let environment: String
    /// The client's own install UUID (registration is idempotent on it).
    public let installId: String
    /// Whether an FCM registration token is set (the token itself is never returned).
    public let fcmToken: String?
    /// `active` or `retired`.
    public let status: String
    public let createdAt: Date
    public let retiredAt: Date?
    /// The OS version the device reports (`"18.2"`, canonical: 1–3 dot-separated numbers),
    /// nil when never reported (docs/endpoints.md "Installation attributes").
    public let osVersion: String?
    /// The device reports that the app supports frequent Live Activity updates and the user
    /// allows them; picks the tenant's larger priority-10 budget (docs/priority-budget.md).
    public let frequentUpdates: Bool
}

/// SQL for installations and their credentials.
public enum InstallationStore {
    static let columns =
        "tenant_id, id, publishable_key_id, app_id, platform, environment, install_id, fcm_token, status, created_at, retired_at, os_version, frequent_updates"

    /// The active installation for (app, platform, install_id), locked for update; `install_id`
    /// is compared case-insensitively (canonical lowercase UUID form; rows stored before
    /// registrations were canonicalised may hold upper case).
    public static func activeByInstallId(
        _ c: PostgresConnection, tenantId: String, appId: String, platform: String, installId: String
    ) throws -> InstallationRecord? {
        try c.query(
            """
            SELECT \(columns) FROM installations
             WHERE tenant_id = $1 AND app_id = $2 AND platform = $3 AND lower(install_id) = lower($4) AND status = 'active' FOR UPDATE
            """, [tenantId, appId, platform, installId]
        ).first.map(InstallationRecord.init(row:))
    }

    /// Inserts a new active installation. `osVersion` is the canonical text of an
    /// `OSVersion` (the column's CHECK refuses anything else).
    public static func insert(
        _ c: PostgresConnection, tenantId: String, id: String, publishableKeyId: String, appId: String,
        platform: String, environment: String, installId: String, fcmToken: String?,
        osVersion: String? = nil, frequentUpdates: Bool = false
    ) throws -> InstallationRecord {
        try InstallationRecord(
            row: c.query(
                """
                INSERT INTO installations (tenant_id, id, publishable_key_id, app_id, platform, environment, install_id, fcm_token,
                                           os_version, frequent_updates)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING \(columns)
                """, [tenantId, id, publishableKeyId, appId, platform, environment, installId, fcmToken, osVersion, frequentUpdates])[0])
    }

    /// Changes the device-reported attributes (`PATCH /v1/installations/{id}`): a nil argument
    /// keeps the stored value. Returns the row, nil when absent.
    public static func setAttributes(
        _ c: PostgresConnection, tenantId: String, id: String, osVersion: String?,
        frequentUpdates: Bool?
    ) throws -> InstallationRecord? {
        try c.query(
            """
            UPDATE installations SET os_version = COALESCE($3, os_version), frequent_updates = COALESCE($4, frequent_updates),
                   updated_at = now()
             WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
            """, [tenantId, id, osVersion, frequentUpdates]
        ).first.map(InstallationRecord.init(row:))
    }

    /// Installation `id` of the tenant, optionally locked.
    public static func get(_ c: PostgresConnection, tenantId: String, id: String, forUpdate: Bool = false) throws -> InstallationRecord? {
        try c.query("SELECT \(columns) FROM installations WHERE tenant_id = $1 AND id = $2\(forUpdate ? " FOR UPDATE" : "")", [tenantId, id])
            .first.map(InstallationRecord.init(row:))
    }

    /// Adds a credential for the installation.
    public static func insertCredential(_ c: PostgresConnection, tenantId: String, id: String, installationId: String, secretHash: String) throws {
        try c.execute(
            """
            INSERT INTO installation_credentials (tenant_id, id, installation_id, secret_hash) VALUES ($1, $2, $3, $4)
            """, [tenantId, id, installationId, secretHash])
    }

    /// Sets every other still-valid credential of the installation to expire after
    /// `graceSeconds` (docs/endpoints.md renew: "old one valid 5 min more"). Returns their ids.
    public static func expireOtherCredentials(
        _ c: PostgresConnection, tenantId: String, installationId: String, keep: String,
        graceSeconds: Double
    ) throws -> [String] {
        try c.query(
            """
            UPDATE installation_credentials SET expires_at = now() + make_interval(secs => $4)
             WHERE tenant_id = $1 AND installation_id = $2 AND id <> $3
               AND (expires_at IS NULL OR expires_at > now() + make_interval(secs => $4))
            RETURNING id
            """, [tenantId, installationId, keep, graceSeconds]
        ).map { try $0.string("id") }
    }

    /// Marks the installation retired (idempotent); returns the row.
    public static func retire(_ c: PostgresConnection, tenantId: String, id: String) throws -> InstallationRecord? {
        try c.query(
            """
            UPDATE installations SET status = 'retired', retired_at = COALESCE(retired_at, now()), updated_at = now()
             WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
            """, [tenantId, id]
        ).first.map(InstallationRecord.init(row:))
    }

    /// A re-registration of an active installation (same install_id, different request):
    /// takes the request's `environment` and, when given, its FCM token.
    public static func refresh(
        _ c: PostgresConnection, tenantId: String, id: String, environment: String, fcmToken: String?
    ) throws -> InstallationRecord? {
        try c.query(
            """
            UPDATE installations SET environment = $3, fcm_token = COALESCE($4, fcm_token), updated_at = now()
             WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
            """, [tenantId, id, environment, fcmToken]
        ).first.map(InstallationRecord.init(row:))
    }

    /// Ids of the installation's credentials that still work (to evict them from every
    /// node's verification cache when the installation changes state).
    public static func liveCredentialIds(_ c: PostgresConnection, tenantId: String, installationId: String) throws -> [String] {
        try c.query(
            """
            SELECT id FROM installation_credentials
             WHERE tenant_id = $1 AND installation_id = $2 AND (expires_at IS NULL OR expires_at > now())
            """, [tenantId, installationId]
        ).map { try $0.string("id") }
    }

    /// Sets or clears the FCM registration token.
    public static func setFCMToken(_ c: PostgresConnection, tenantId: String, id: String, token: String?) throws {
        try c.execute("UPDATE installations SET fcm_token = $3, updated_at = now() WHERE tenant_id = $1 AND id = $2", [tenantId, id, token])
    }
}

extension InstallationStore {
    /// Retires the installation and everything hanging off it (docs/endpoints.md disconnect): bindings
    /// and start targets retire, live targets end with reason `installation_retired` and their
    /// queued operations are cancelled.
    /// Idempotent. Returns the retired installation.
    public static func retireAll(_ c: PostgresConnection, tenantId: String, id: String) throws -> InstallationRecord {
        guard let inst = try retire(c, tenantId: tenantId, id: id) else {
            throw PostgresError(kind: .query, message: "installation vanished during retire")
        }
        try c.execute(
            """
            UPDATE bindings SET status = 'retired', retired_at = COALESCE(retired_at, now())
             WHERE tenant_id = $1 AND installation_id = $2 AND status <> 'retired'
            """, [tenantId, id])
        try c.execute(
            """
            UPDATE start_targets SET status = 'retired', updated_at = now()
             WHERE tenant_id = $1 AND installation_id = $2 AND status <> 'retired'
            """, [tenantId, id])
        let ended = try c.query(
            """
            UPDATE targets SET status = 'ended', end_reason = 'installation_retired', ended_at = now(), updated_at = now()
             WHERE tenant_id = $1 AND installation_id = $2 AND status NOT IN ('ended', 'creation_failed')
            RETURNING id
            """, [tenantId, id])
        // Their queued operations are cancelled (quota released) and long-polls woken.
        for row in ended {
            let target = try row.string("id")
            try OperationStore.cancelQueued(c, tenantId: tenantId, targetId: target, reason: "installation_retired")
            try c.notify(OperationStore.eventsChannel, payload: target)
        }
        return inst
    }
}
