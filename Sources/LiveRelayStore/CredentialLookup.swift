import Foundation
import LiveRelayCore
import Postgres

/// What the database holds about one presented credential, read in the system scope before
/// the tenant is known (docs/credentials.md). `usable` is false when it is revoked or past its expiry;
/// `validUntil` bounds how long a verification may be cached.
public struct StoredCredential: Sendable {
    public let kind: CredentialKind
    /// The credential row id (`mk_…`, `sk_…`, `ic_…`, …).
    public let id: String
    /// nil for operator keys.
    public let tenantId: String?
    /// `active`/`suspended` (nil for operator keys).
    public let tenantStatus: String?
    /// argon2id PHC string.
    public let secretHash: String
    /// Not revoked and not expired, by the database clock.
    public let usable: Bool
    /// When it stops working (grace period, sender key expiry, renewed installation credential).
    public let validUntil: Date?
    /// Sender keys: coverage fields.
    public let targets: [String]
    public let createdFrom: [String]
    public let permissions: [String]
    /// Publishable keys: the app it is for (nil = any) and platform (nil = any).
    public let appId: String?
    public let platform: String?
    /// Installation credentials: the installation and whether it is `active` or `retired`.
    public let installationId: String?
    public let installationStatus: String?
}

/// Reads credential rows by their public id, in the system scope.
public enum CredentialLookup {
    /// The stored row for `token`'s id and kind, or nil when there is none.
    public static func find(_ c: PostgresConnection, _ token: CredentialToken) throws -> StoredCredential? {
        func make(_ r: PostgresRow, tenant: Bool = true) throws -> StoredCredential {
            StoredCredential(
                kind: token.kind, id: token.id,
                tenantId: tenant ? try r.string("tenant_id") : nil,
                tenantStatus: tenant ? try r.string("tenant_status") : nil,
                secretHash: try r.string("secret_hash"), usable: try r.bool("usable"),
                validUntil: try r.optionalDate("valid_until"),
                targets: r.columns.contains("targets") ? try r.stringArray("targets") : [],
                createdFrom: r.columns.contains("created_from") ? try r.stringArray("created_from") : [],
                permissions: r.columns.contains("permissions") ? try r.stringArray("permissions") : [],
                appId: r.columns.contains("app_id") ? try r.optionalString("app_id") : nil,
                platform: r.columns.contains("platform") ? try r.optionalString("platform") : nil,
                installationId: r.columns.contains("installation_id") ? try r.optionalString("installation_id") : nil,
                installationStatus: r.columns.contains("installation_status") ? try r.optionalString("installation_status") : nil)
        }
        switch token.kind {
        case .operator:
            return try c.query(
                """
                SELECT secret_hash, revoked_at IS NULL AS usable, NULL::timestamptz AS valid_until FROM operator_keys WHERE id = $1
                """, [token.id]
            ).first.map { try make($0, tenant: false) }
        case .master:
            return try c.query(
                """
                SELECT k.tenant_id, t.status AS tenant_status, k.secret_hash, (k.expires_at IS NULL OR k.expires_at > now()) AS usable,
                       k.expires_at AS valid_until
                  FROM master_keys k JOIN tenants t ON t.tenant_id = k.tenant_id WHERE k.id = $1
                """, [token.id]
            ).first.map { try make($0) }
        case .sender:
            return try c.query(
                """
                SELECT k.tenant_id, t.status AS tenant_status, k.secret_hash,
                       (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())) AS usable,
                       k.expires_at AS valid_until, k.targets, k.created_from, k.permissions
                  FROM sender_keys k JOIN tenants t ON t.tenant_id = k.tenant_id WHERE k.id = $1
                """, [token.id]
            ).first.map { try make($0) }
        case .publishable:
            return try c.query(
                """
                SELECT k.tenant_id, t.status AS tenant_status, k.secret_hash, k.revoked_at IS NULL AS usable,
                       NULL::timestamptz AS valid_until, k.app_id, k.platform
                  FROM publishable_keys k JOIN tenants t ON t.tenant_id = k.tenant_id WHERE k.id = $1
                """, [token.id]
            ).first.map { try make($0) }
        case .installation:
            return try c.query(
                """
                SELECT k.tenant_id, t.status AS tenant_status, k.secret_hash, (k.expires_at IS NULL OR k.expires_at > now()) AS usable,
                       k.expires_at AS valid_until, k.installation_id, i.status AS installation_status, i.app_id, i.platform
                  FROM installation_credentials k
                  JOIN installations i ON i.tenant_id = k.tenant_id AND i.id = k.installation_id
                  JOIN tenants t ON t.tenant_id = k.tenant_id WHERE k.id = $1
                """, [token.id]
            ).first.map { try make($0) }
        }
    }

    /// Notification channel on which revocations and suspensions are announced, so every
    /// node drops cached verifications within a second (docs/credentials.md).
    public static let invalidationChannel = "liverelay_auth"

    /// Announces (inside the caller's transaction, so only on commit) that cached
    /// verifications of `subject` must go: a key id, or `tenant:<tenant id>`.
    public static func announceInvalidation(_ c: PostgresConnection, subject: String) throws {
        try c.notify(invalidationChannel, payload: subject)
    }
}
