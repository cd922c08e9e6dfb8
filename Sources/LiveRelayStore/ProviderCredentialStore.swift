import Foundation
import Crypto
import Postgres

/// One stored APNs token-auth credential (migration 0004 `apns_credentials`). The private key
/// is only ever held here sealed (AES-256-GCM under `LIVERELAY_KEK`); open it with
/// `ProviderCredentialStore.openPrivateKey`.
public struct APNsCredentialRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    /// `sandbox` or `production`.
    public let environment: String
    public let teamId: String
    public let keyId: String
    /// Bundle ids the key may push to (the APNs topic is `<bundle>.push-type.liveactivity`).
    public let topics: [String]
    public let privateKeySealed: [UInt8]
    /// `sha256:<hex>` of the public key's SubjectPublicKeyInfo DER.
    public let fingerprint: String
    public let createdBy: String
    public let createdAt: Date
    public let updatedAt: Date
    public let lastSuccessAt: Date?
    public let lastFailureAt: Date?
    public let lastFailureReason: String?
}

/// One stored FCM service account (migration 0004 `fcm_credentials`); the RSA private key is
/// sealed as for APNs.
public struct FCMCredentialRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let projectId: String
    public let clientEmail: String
    public let privateKeyId: String
    /// The OAuth2 token endpoint of the service account (`token_uri`).
    public let tokenURI: String
    public let privateKeySealed: [UInt8]
    public let fingerprint: String
    public let createdBy: String
    public let createdAt: Date
    public let updatedAt: Date
    public let lastSuccessAt: Date?
    public let lastFailureAt: Date?
    public let lastFailureReason: String?
}

/// A health report about one credential: the provider accepted a request signed with it
/// (`failureReason == nil`) or rejected the credential itself.
public struct ProviderCredentialHealthReport: Sendable, Equatable {
    /// `apns` or `fcm`.
    public let provider: String
    public let tenantId: String
    /// APNs environment of the credential row (nil for FCM).
    public let environment: String?
    /// Fingerprint of the key that was used: reports about a since-replaced key are ignored.
    public let fingerprint: String
    public let at: Date
    /// nil for success; else e.g. `403 InvalidProviderToken` (never a secret).
    public let failureReason: String?

    public init(provider: String, tenantId: String, environment: String?, fingerprint: String, at: Date, failureReason: String?) {
        self.provider = provider; self.tenantId = tenantId; self.environment = environment
        self.fingerprint = fingerprint; self.at = at; self.failureReason = failureReason
    }
}

/// SQL for provider credentials (docs/endpoints.md, migration 0004).
public enum ProviderCredentialStore {
    static let apnsColumns = """
        tenant_id, environment, team_id, key_id, topics, private_key_sealed, fingerprint, created_by, created_at, updated_at,
        last_success_at, last_failure_at, last_failure_reason
        """
    static let fcmColumns = """
        tenant_id, project_id, client_email, private_key_id, token_uri, private_key_sealed, fingerprint, created_by, created_at,
        updated_at, last_success_at, last_failure_at, last_failure_reason
        """

    /// Associated data binding a sealed key to its row: `provider-credential:<tenant>:<provider>[:<environment>]`.
    public static func associatedData(tenantId: String, provider: String, environment: String?) -> [UInt8] {
        Array("provider-credential:\(tenantId):\(provider)\(environment.map { ":" + $0 } ?? "")".utf8)
    }

    /// Seals a private key PEM for the given row.
    public static func sealPrivateKey(_ pem: String, kek: AESGCM, tenantId: String, provider: String, environment: String?) throws -> [UInt8] {
        try kek.seal(Array(pem.utf8), associatedData: associatedData(tenantId: tenantId, provider: provider, environment: environment))
    }

    /// Opens a sealed private key PEM (throws `CryptoError` for a wrong KEK or a moved box).
    public static func openPrivateKey(_ sealed: [UInt8], kek: AESGCM, tenantId: String, provider: String, environment: String?) throws -> String {
        let bytes = try kek.open(sealed, associatedData: associatedData(tenantId: tenantId, provider: provider, environment: environment))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The tail of both upserts' `ON CONFLICT … DO UPDATE SET` for the existing row `alias`: the
    /// new creator and `updated_at`, and the last success/failure kept only when the key is the
    /// same (its fingerprint), else cleared.
    static func replacedKeyColumns(alias: String) -> String {
        """
        created_by = EXCLUDED.created_by, updated_at = now(),
          last_success_at = CASE WHEN \(alias).fingerprint = EXCLUDED.fingerprint THEN \(alias).last_success_at END,
          last_failure_at = CASE WHEN \(alias).fingerprint = EXCLUDED.fingerprint THEN \(alias).last_failure_at END,
          last_failure_reason = CASE WHEN \(alias).fingerprint = EXCLUDED.fingerprint THEN \(alias).last_failure_reason END
        """
    }

    /// Creates or replaces the tenant's APNs credential for `environment`. A new key
    /// (different fingerprint) clears the last success/failure. Returns the row and whether it
    /// was created (true) or replaced (false).
    public static func upsertAPNs(
        _ c: PostgresConnection, tenantId: String, environment: String, teamId: String, keyId: String,
        topics: [String], privateKeySealed: [UInt8], fingerprint: String,
        actorId: String
    ) throws -> (record: APNsCredentialRecord, created: Bool) {
        let row = try c.query(
            """
            INSERT INTO apns_credentials AS a (tenant_id, environment, team_id, key_id, topics, private_key_sealed, fingerprint, created_by)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (tenant_id, environment) DO UPDATE SET
              team_id = EXCLUDED.team_id, key_id = EXCLUDED.key_id, topics = EXCLUDED.topics,
              private_key_sealed = EXCLUDED.private_key_sealed, fingerprint = EXCLUDED.fingerprint,
              \(replacedKeyColumns(alias: "a"))
            RETURNING \(apnsColumns), (xmax = 0) AS created
            """, [tenantId, environment, teamId, keyId, PostgresTextArray(topics), privateKeySealed, fingerprint, actorId])[0]
        return (try APNsCredentialRecord(row: row), try row.bool("created"))
    }

    /// Creates or replaces the tenant's FCM service account (as `upsertAPNs`).
    public static func upsertFCM(
        _ c: PostgresConnection, tenantId: String, projectId: String, clientEmail: String,
        privateKeyId: String, tokenURI: String, privateKeySealed: [UInt8], fingerprint: String,
        actorId: String
    ) throws -> (record: FCMCredentialRecord, created: Bool) {
        let row = try c.query(
            """
            INSERT INTO fcm_credentials AS f (tenant_id, project_id, client_email, private_key_id, token_uri, private_key_sealed,
                                              fingerprint, created_by)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (tenant_id) DO UPDATE SET
              project_id = EXCLUDED.project_id, client_email = EXCLUDED.client_email, private_key_id = EXCLUDED.private_key_id,
              token_uri = EXCLUDED.token_uri, private_key_sealed = EXCLUDED.private_key_sealed, fingerprint = EXCLUDED.fingerprint,
              \(replacedKeyColumns(alias: "f"))
            RETURNING \(fcmColumns), (xmax = 0) AS created
            """, [tenantId, projectId, clientEmail, privateKeyId, tokenURI, privateKeySealed, fingerprint, actorId])[0]
        return (try FCMCredentialRecord(row: row), try row.bool("created"))
    }

    /// The tenant's APNs credentials (at most one per environment), production first.
    public static func apnsCredentials(_ c: PostgresConnection, tenantId: String) throws -> [APNsCredentialRecord] {
        try c.query(
            "SELECT \(apnsColumns) FROM apns_credentials WHERE tenant_id = $1 ORDER BY environment",
            [tenantId]
        ).map(APNsCredentialRecord.init(row:))
    }

    /// The tenant's FCM service account, if any.
    public static func fcmCredential(_ c: PostgresConnection, tenantId: String) throws -> FCMCredentialRecord? {
        try c.query("SELECT \(fcmColumns) FROM fcm_credentials WHERE tenant_id = $1", [tenantId]).first.map(FCMCredentialRecord.init(row:))
    }

    /// Applies health reports of one tenant (coalesced by the caller): moves `last_success_at`
    /// / `last_failure_at` forward only, and only while the fingerprint still matches.
    public static func recordHealth(_ c: PostgresConnection, _ reports: [ProviderCredentialHealthReport]) throws {
        for r in reports {
            let table = r.provider == "apns" ? "apns_credentials" : "fcm_credentials"
            let envFilter = r.provider == "apns" ? "AND environment = $4" : "AND $4::text IS NULL"
            if let reason = r.failureReason {
                try c.execute(
                    """
                    UPDATE \(table) SET last_failure_at = $3, last_failure_reason = $5
                     WHERE tenant_id = $1 AND fingerprint = $2 \(envFilter) AND (last_failure_at IS NULL OR last_failure_at <= $3)
                    """, [r.tenantId, r.fingerprint, r.at, r.provider == "apns" ? r.environment : nil, String(reason.prefix(200))])
            } else {
                try c.execute(
                    """
                    UPDATE \(table) SET last_success_at = $3
                     WHERE tenant_id = $1 AND fingerprint = $2 \(envFilter) AND (last_success_at IS NULL OR last_success_at < $3)
                    """, [r.tenantId, r.fingerprint, r.at, r.provider == "apns" ? r.environment : nil])
            }
        }
    }

    /// NOTIFY channel of provider-credential changes; the payload is the tenant id. Sent in the
    /// transaction of every PUT and DELETE (delivered at commit), so each node's credential
    /// cache drops that tenant at once instead of after its lifetime (docs/operations.md).
    public static let changeChannel = "liverelay_provider_credentials"

    /// Tells every node that `tenantId`'s provider credentials changed (see `changeChannel`).
    public static func notifyChanged(_ c: PostgresConnection, tenantId: String) throws {
        try c.notify(changeChannel, payload: tenantId)
    }

    /// Deletes the tenant's APNs credential of `environment` (nil: of both environments) and
    /// returns the deleted rows, production first (empty when there was none).
    public static func deleteAPNs(_ c: PostgresConnection, tenantId: String, environment: String?) throws -> [APNsCredentialRecord] {
        try c.query(
            """
            DELETE FROM apns_credentials WHERE tenant_id = $1 AND ($2::text IS NULL OR environment = $2)
            RETURNING \(apnsColumns)
            """, [tenantId, environment]
        ).map(APNsCredentialRecord.init(row:)).sorted { $0.environment < $1.environment }
    }

    /// Deletes the tenant's FCM service account; returns it (nil when there was none).
    public static func deleteFCM(_ c: PostgresConnection, tenantId: String) throws -> FCMCredentialRecord? {
        try c.query("DELETE FROM fcm_credentials WHERE tenant_id = $1 RETURNING \(fcmColumns)", [tenantId]).first.map(FCMCredentialRecord.init(row:))
    }
}
