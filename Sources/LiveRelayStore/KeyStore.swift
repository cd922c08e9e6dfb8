import Foundation
import Postgres

/// A master key's metadata (never its secret). docs/endpoints.md tenant admin.
public struct MasterKeyRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let id: String
    public let label: String
    public let createdBy: String?
    public let createdAt: Date
    /// When revocation was asked for.
    public let revokedAt: Date?
    /// When the key stops working (now, or after the grace period).
    public let expiresAt: Date?

    /// `active`, `revoking` (revoked with a grace period still running) or `revoked`.
    public func status(now: Date) -> String {
        guard let e = expiresAt else { return "active" }
        return e > now ? (revokedAt == nil ? "active" : "revoking") : "revoked"
    }
}

/// A sender key's metadata (docs/credentials.md "Sender key coverage").
public struct SenderKeyRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let id: String
    public let label: String
    public let targets: [String]
    public let createdFrom: [String]
    public let permissions: [String]
    public let createdBy: String
    public let createdAt: Date
    public let expiresAt: Date?
    public let revokedAt: Date?

    /// `active`, `expired` or `revoked`.
    public func status(now: Date) -> String {
        if revokedAt != nil { return "revoked" }
        if let e = expiresAt, e <= now { return "expired" }
        return "active"
    }
}

/// A publishable key's metadata (docs/glossary.md: devices embed it; it can only register installations).
public struct PublishableKeyRecord: Sendable, Equatable, RowDecodable {
    public let tenantId: String
    public let id: String
    /// The app it is for (bundle id / package name); nil = any app of the tenant.
    public let appId: String?
    /// `ios`/`android`; nil = any.
    public let platform: String?
    public let label: String
    public let createdAt: Date
    public let revokedAt: Date?
}

/// SQL for operator, master, sender and publishable keys. Secrets arrive here only as argon2id hashes.
public enum KeyStore {
    static let masterColumns = "tenant_id, id, label, created_by, created_at, revoked_at, expires_at"
    static let senderColumns = "tenant_id, id, label, targets, created_from, permissions, created_by, created_at, expires_at, revoked_at"
    static let publishableColumns = "tenant_id, id, app_id, platform, label, created_at, revoked_at"

    /// Inserts an operator key (deployment-wide, no tenant).
    public static func insertOperatorKey(_ c: PostgresConnection, id: String, label: String, secretHash: String) throws {
        try c.execute("INSERT INTO operator_keys (id, label, secret_hash) VALUES ($1, $2, $3)", [id, label, secretHash])
    }

    // MARK: master keys

    public static func insertMasterKey(
        _ c: PostgresConnection, tenantId: String, id: String, label: String, secretHash: String, createdBy: String?
    ) throws -> MasterKeyRecord {
        try MasterKeyRecord(
            row: c.query(
                """
                INSERT INTO master_keys (tenant_id, id, label, secret_hash, created_by) VALUES ($1, $2, $3, $4, $5) RETURNING \(masterColumns)
                """, [tenantId, id, label, secretHash, createdBy])[0])
    }

    public static func masterKey(_ c: PostgresConnection, tenantId: String, id: String, forUpdate: Bool = false) throws -> MasterKeyRecord? {
        try c.query("SELECT \(masterColumns) FROM master_keys WHERE tenant_id = $1 AND id = $2\(forUpdate ? " FOR UPDATE" : "")", [tenantId, id])
            .first.map(MasterKeyRecord.init(row:))
    }

    public static func listMasterKeys(_ c: PostgresConnection, tenantId: String, limit: Int, after: String?) throws -> Page<MasterKeyRecord> {
        try Page.ascendingById(
            c, table: "master_keys", columns: masterColumns, tenantId: tenantId, after: after, limit: limit, id: \.id,
            decode: MasterKeyRecord.init(row:))
    }

    /// Master keys of the tenant that work now and are not scheduled to stop, locked
    /// (`FOR UPDATE`) so two concurrent revocations cannot both leave zero.
    public static func lockUnrevokedMasterKeyIds(_ c: PostgresConnection, tenantId: String) throws -> [String] {
        try c.query(
            """
            SELECT id FROM master_keys WHERE tenant_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
            ORDER BY id FOR UPDATE
            """, [tenantId]
        ).map { try $0.string("id") }
    }

    /// The database's clock (`now()`, the transaction's start time): the one clock every
    /// credential expiry is compared with (docs/security.md "Clocks").
    public static func databaseNow(_ c: PostgresConnection) throws -> Date {
        try c.query("SELECT now() AS now")[0].date("now")
    }

    /// Revokes master key `id` now or at `expiresAt` (grace period); keeps an earlier expiry.
    public static func revokeMasterKey(_ c: PostgresConnection, tenantId: String, id: String, expiresAt: Date) throws -> MasterKeyRecord? {
        try c.query(
            """
            UPDATE master_keys SET revoked_at = COALESCE(revoked_at, now()),
                   expires_at = LEAST(COALESCE(expires_at, $3::timestamptz), $3::timestamptz)
             WHERE tenant_id = $1 AND id = $2 RETURNING \(masterColumns)
            """, [tenantId, id, expiresAt]
        ).first.map(MasterKeyRecord.init(row:))
    }

    /// Sets `revoked_at` of key `id` in `table` (sender or publishable keys) to now unless it
    /// is set already (an earlier revocation time is kept); returns the row's `columns`, nil
    /// when there is no such key.
    static func revokeNow(_ c: PostgresConnection, table: String, columns: String, tenantId: String, id: String) throws -> PostgresRow? {
        try c.query(
            """
            UPDATE \(table) SET revoked_at = COALESCE(revoked_at, now()) WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
            """, [tenantId, id]
        ).first
    }

    // MARK: sender keys

    public static func insertSenderKey(
        _ c: PostgresConnection, tenantId: String, id: String, label: String, secretHash: String,
        targets: [String], createdFrom: [String], permissions: [String], createdBy: String,
        expiresAt: Date?
    ) throws -> SenderKeyRecord {
        try SenderKeyRecord(
            row: c.query(
                """
                INSERT INTO sender_keys (tenant_id, id, label, secret_hash, targets, created_from, permissions, created_by, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING \(senderColumns)
                """,
                [
                    tenantId, id, label, secretHash, PostgresTextArray(targets), PostgresTextArray(createdFrom),
                    PostgresTextArray(permissions), createdBy, expiresAt
                ])[0])
    }

    public static func senderKey(_ c: PostgresConnection, tenantId: String, id: String) throws -> SenderKeyRecord? {
        try c.query("SELECT \(senderColumns) FROM sender_keys WHERE tenant_id = $1 AND id = $2", [tenantId, id]).first.map(SenderKeyRecord.init(row:))
    }

    public static func listSenderKeys(_ c: PostgresConnection, tenantId: String, limit: Int, after: String?) throws -> Page<SenderKeyRecord> {
        try Page.ascendingById(
            c, table: "sender_keys", columns: senderColumns, tenantId: tenantId, after: after, limit: limit, id: \.id,
            decode: SenderKeyRecord.init(row:))
    }

    /// Revokes sender key `id` now (idempotent: an earlier revocation time is kept).
    public static func revokeSenderKey(_ c: PostgresConnection, tenantId: String, id: String) throws -> SenderKeyRecord? {
        try revokeNow(c, table: "sender_keys", columns: senderColumns, tenantId: tenantId, id: id).map(SenderKeyRecord.init(row:))
    }

    // MARK: publishable keys

    public static func insertPublishableKey(
        _ c: PostgresConnection, tenantId: String, id: String, appId: String?, platform: String?,
        label: String, secretHash: String, createdBy: String?
    ) throws -> PublishableKeyRecord {
        try PublishableKeyRecord(
            row: c.query(
                """
                INSERT INTO publishable_keys (tenant_id, id, app_id, platform, label, secret_hash, created_by)
                VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING \(publishableColumns)
                """, [tenantId, id, appId, platform, label, secretHash, createdBy])[0])
    }

    public static func publishableKey(_ c: PostgresConnection, tenantId: String, id: String) throws -> PublishableKeyRecord? {
        try c.query("SELECT \(publishableColumns) FROM publishable_keys WHERE tenant_id = $1 AND id = $2", [tenantId, id])
            .first.map(PublishableKeyRecord.init(row:))
    }

    public static func listPublishableKeys(_ c: PostgresConnection, tenantId: String, limit: Int, after: String?) throws -> Page<PublishableKeyRecord>
    {
        try Page.ascendingById(
            c, table: "publishable_keys", columns: publishableColumns, tenantId: tenantId, after: after, limit: limit, id: \.id,
            decode: PublishableKeyRecord.init(row:))
    }

    public static func revokePublishableKey(_ c: PostgresConnection, tenantId: String, id: String) throws -> PublishableKeyRecord? {
        try revokeNow(c, table: "publishable_keys", columns: publishableColumns, tenantId: tenantId, id: id).map(PublishableKeyRecord.init(row:))
    }
}

/// Existence checks for ids named in a sender key (docs/credentials.md `targets`, `created_from`).
public enum ObjectIds {
    /// The subset of `ids` that are start targets (`st_…`), targets (`tgt_…`) or channels (`ch_…`) of the tenant.
    public static func existing(_ c: PostgresConnection, tenantId: String, ids: [String]) throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let rows = try c.query(
            """
            SELECT id FROM start_targets WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id FROM targets WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id FROM channels WHERE tenant_id = $1 AND id = ANY($2::text[])
            """, [tenantId, PostgresTextArray(ids)])
        return Set(try rows.map { try $0.string("id") })
    }
}
