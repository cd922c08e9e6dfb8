import Foundation
import Crypto
import LiveRelayCore
import Postgres

/// A response kept for replay: HTTP status and the exact JSON body bytes.
public struct StoredResponse: Sendable, Equatable {
    public let status: Int
    public let body: [UInt8]
    public init(status: Int, body: [UInt8]) { self.status = status; self.body = body }
}

/// docs/http-conventions.md idempotency, scope (tenant, endpoint, key), done inside the write's own transaction:
///
/// 1. `claim` inserts the key's row. A concurrent transaction holding the same key makes the
///    insert wait on the unique index until it commits (then this one replays it) or rolls
///    back (then this one does the work) — "one commits, the other replays".
/// 2. The caller does the work and calls `complete` with the response in the same transaction,
///    so the stored response exists exactly when the work does.
///
/// An update or an end reads its key instead (`lookupLateral`) and inserts the record with its
/// response as its transaction's last statement (`storeStatements`, `storeFailure`): one row
/// version per write, the same outcome for concurrent requests (docs/write-path.md "Idempotency").
/// Responses that carry a secret (new credentials) are stored only AES-256-GCM-sealed under
/// the key-encryption key, and every record is purged after 24 h (`purgeExpired`).
public enum IdempotencyStore {
    /// How long a key is kept (docs/http-conventions.md: at least 24 h).
    public static let retentionSeconds: Double = 24 * 3600
    /// How long a request waits for a concurrent holder of its key before `409 IDEMPOTENCY_KEY_IN_USE`.
    public static let waitSeconds = 10

    /// Runs a claim's `INSERT … RETURNING`: true when it inserted (or took over) the record,
    /// false when the key is held by an earlier request.
    /// - Throws: `DomainError` 409 `IDEMPOTENCY_KEY_IN_USE` when the wait for a concurrent
    ///   holder ran out (`lock_timeout`, SQLSTATE 55P03); other errors as thrown by `insert`.
    static func insertedClaim(_ insert: () throws -> [PostgresRow]) throws -> Bool {
        do {
            return try !insert().isEmpty
        } catch let e as PostgresError where e.sqlState == "55P03" {
            throw DomainError(
                status: 409, code: "IDEMPOTENCY_KEY_IN_USE",
                message: "another request with this idempotency_key is still being processed; retry shortly",
                details: ["field": "idempotency_key"])
        }
    }

    /// Claims the key. Returns nil when this transaction must do the work, or the stored
    /// response to replay.
    /// - Throws: `DomainError` 422 `IDEMPOTENCY_KEY_REUSED` (same key, different request),
    ///   409 `IDEMPOTENCY_KEY_IN_USE` (a concurrent holder did not finish in `waitSeconds`).
    public static func claim(
        _ c: PostgresConnection, tenantId: String, endpoint: String, key: String, requestHash: String,
        kek: AESGCM, retentionSeconds: Double = retentionSeconds
    ) throws -> StoredResponse? {
        // lock_timeout (Database.lockTimeout, 10 s) bounds the wait for a concurrent holder.
        // A record past its retention is gone, purged or not: it is taken over as new,
        // so a stored (sealed) response is never replayed after 24 h.
        let inserted = try insertedClaim {
            try c.query(
                """
                INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, expires_at)
                VALUES ($1, $2, $3, $4, 0, now() + make_interval(secs => $5))
                ON CONFLICT (tenant_id, endpoint, key) DO UPDATE
                   SET request_hash = EXCLUDED.request_hash, status_code = 0, response_body = NULL, response_sealed = NULL,
                       created_at = now(), expires_at = EXCLUDED.expires_at
                 WHERE idempotency_records.expires_at < now()
                RETURNING 1 AS one
                """, [tenantId, endpoint, key, requestHash, retentionSeconds])
        }
        if inserted { return nil }
        guard
            let row = try c.query(
                """
                SELECT request_hash, status_code, response_body, response_sealed FROM idempotency_records
                 WHERE tenant_id = $1 AND endpoint = $2 AND key = $3
                """, [tenantId, endpoint, key]
            ).first
        else {
            // Purged between the insert attempt and the read: treat as new on the caller's retry.
            throw PostgresError.retryable
        }
        guard try row.string("request_hash") == requestHash else {
            throw reused
        }
        let status = try row.int("status_code")
        if let sealed = try row.optionalBytes("response_sealed") {
            let body = try kek.open(sealed, associatedData: aad(tenantId, endpoint, key))
            return StoredResponse(status: status, body: body)
        }
        return StoredResponse(status: status, body: try row.optionalBytes("response_body") ?? [])
    }

    /// The finished response stored under the key, read without claiming it (nil when there is
    /// none, it is past its retention, its request is still running, or it was another
    /// request): for requests that can answer a replay before expensive work (a registration
    /// before its argon2 run). The claim in the request's transaction stays authoritative.
    /// - Throws: `PostgresError`; `CryptoError` when a sealed response does not open.
    public static func peek(
        _ c: PostgresConnection, tenantId: String, endpoint: String, key: String, requestHash: String, kek: AESGCM
    ) throws -> StoredResponse? {
        guard
            let row = try c.query(
                """
                SELECT request_hash, status_code, response_body, response_sealed FROM idempotency_records
                 WHERE tenant_id = $1 AND endpoint = $2 AND key = $3 AND expires_at >= now() AND status_code <> 0
                """, [tenantId, endpoint, key]
            ).first, try row.string("request_hash") == requestHash
        else { return nil }
        let status = try row.int("status_code")
        if let sealed = try row.optionalBytes("response_sealed") {
            return StoredResponse(status: status, body: try kek.open(sealed, associatedData: aad(tenantId, endpoint, key)))
        }
        return StoredResponse(status: status, body: try row.optionalBytes("response_body") ?? [])
    }

    /// The claim as ONE statement that can travel in a pipeline (docs/write-path.md
    /// "Idempotency"): inserts the key's row, or — when the key exists — rewrites it in place
    /// (taking over a record past its retention as new) and returns it. A concurrent holder of
    /// the key makes the statement wait on the unique index until it commits (then its row
    /// comes back, to replay) or rolls back (then the insert goes ahead). Decode with
    /// `claimed(_:requestHash:)`. Parameters: tenant, endpoint, key, request hash, retention
    /// seconds. Plain responses only (no sealing).
    public static func claimStatement(
        tenantId: String, endpoint: String, key: String, requestHash: String,
        retentionSeconds: Double
    ) -> PostgresStatement {
        PostgresStatement(
            """
            INSERT INTO idempotency_records AS r (tenant_id, endpoint, key, request_hash, status_code, expires_at)
            VALUES ($1, $2, $3, $4, 0, now() + make_interval(secs => $5))
            ON CONFLICT (tenant_id, endpoint, key) DO UPDATE
               SET request_hash = CASE WHEN r.expires_at < now() THEN EXCLUDED.request_hash ELSE r.request_hash END,
                   status_code = CASE WHEN r.expires_at < now() THEN 0 ELSE r.status_code END,
                   response_body = CASE WHEN r.expires_at < now() THEN NULL ELSE r.response_body END,
                   response_sealed = CASE WHEN r.expires_at < now() THEN NULL ELSE r.response_sealed END,
                   created_at = CASE WHEN r.expires_at < now() THEN now() ELSE r.created_at END,
                   expires_at = CASE WHEN r.expires_at < now() THEN EXCLUDED.expires_at ELSE r.expires_at END
            RETURNING request_hash, status_code, response_body
            """, [tenantId, endpoint, key, requestHash, retentionSeconds])
    }

    /// The outcome of `claimStatement`: nil when this transaction claimed the key (do the
    /// work), else the stored response to replay.
    /// - Throws: `DomainError` 422 `IDEMPOTENCY_KEY_REUSED` (same key, different request).
    public static func claimed(_ rows: [PostgresRow], requestHash: String) throws -> StoredResponse? {
        guard let row = rows.first else { throw PostgresError(kind: .decoding, message: "idempotency claim returned no row") }
        let status = try row.int("status_code")
        if status == 0 { return nil }  // a fresh (or taken over) claim: ours
        guard try row.string("request_hash") == requestHash else {
            throw reused
        }
        return StoredResponse(status: status, body: try row.optionalBytes("response_body") ?? [])
    }

    /// What an update's or an end's read of its key found (`looked(_:requestHash:)`).
    public enum Lookup: Sendable, Equatable {
        /// No record: do the work and store the answer with it (`storeStatements`).
        case absent
        /// A record past its retention: taken over as new (`storeStatements(replacingExpired: true)`).
        case expired
        /// The finished request's answer, to replay.
        case stored(StoredResponse)
    }

    /// The key's record as columns of another row (`key_request_hash`, `key_status_code`,
    /// `key_response_body`, `key_expired`; all NULL without a record), read without claiming
    /// it: round trip 1 of an update or an end joins it to its locked target
    /// (`WritePath.lockTarget`), and stores its answer with its writes at commit
    /// (`storeStatements`) instead of claiming first (docs/write-path.md "Idempotency").
    /// `tenant`, `endpoint`, `key`: the SQL expressions (parameters) naming the scope. Append
    /// after a FROM list as `LEFT JOIN LATERAL (…) idem ON true`; decode with
    /// `looked(_:requestHash:)`.
    public static func lookupLateral(tenant: String, endpoint: String, key: String) -> String {
        """
        SELECT r.request_hash AS key_request_hash, r.status_code AS key_status_code, r.response_body AS key_response_body,
               r.expires_at < now() AS key_expired
          FROM idempotency_records r WHERE r.tenant_id = \(tenant) AND r.endpoint = \(endpoint) AND r.key = \(key)
        """
    }

    /// The outcome of `lookupLateral` in `row`.
    /// - Throws: `DomainError` 422 `IDEMPOTENCY_KEY_REUSED` (same key, different request, within
    ///   its retention); `PostgresError` `.decoding` on a malformed row.
    public static func looked(_ row: PostgresRow, requestHash: String) throws -> Lookup {
        guard let expired = try row.optionalBool("key_expired") else { return .absent }
        if expired { return .expired }
        guard try row.string("key_request_hash") == requestHash else {
            throw reused
        }
        return .stored(StoredResponse(status: try row.int("key_status_code"), body: try row.optionalBytes("key_response_body") ?? []))
    }

    /// The statements that store an update's or an end's answer under its key in the write's
    /// own transaction, last before `COMMIT`: the record is inserted with the response (one row
    /// version instead of a claim and its completion). With `replacingExpired` (the lookup found
    /// the record past its retention) the old record is deleted first. A concurrent request
    /// with the same key that committed in between makes the insert fail with SQLSTATE 23505,
    /// and one still running makes it wait on the unique index (at most `lock_timeout`:
    /// 55P03); `storeFailure` turns those into a retry (whose lookup replays it) and
    /// `409 IDEMPOTENCY_KEY_IN_USE`. Plain responses only (write responses hold no secret).
    public static func storeStatements(
        tenantId: String, endpoint: String, key: String, requestHash: String, response: StoredResponse,
        retentionSeconds: Double, replacingExpired: Bool
    ) -> [PostgresStatement] {
        let insert = PostgresStatement(
            """
            INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, response_body, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
            """, [tenantId, endpoint, key, requestHash, response.status, response.body, retentionSeconds])
        guard replacingExpired else { return [insert] }
        return [
            PostgresStatement(
                "DELETE FROM idempotency_records WHERE tenant_id = $1 AND endpoint = $2 AND key = $3 AND expires_at < now()",
                [tenantId, endpoint, key]),
            insert
        ]
    }

    /// Maps the failure of the statement holding `storeStatements`' insert (at `index` of its
    /// pipeline's `outcome`; it may be part of a combined statement): a unique violation of the
    /// key (`idempotency_records_pkey`) → a retry of the whole transaction (SQLSTATE 40001: its
    /// read of the key then finds the other request's answer); 55P03 → `inUse`. Any other
    /// failure, or one at another statement, is left to the caller (`outcome.get()`).
    public static func storeFailure(_ outcome: PostgresPipelineOutcome, at index: Int) throws {
        guard let f = outcome.failure, f.index == index else { return }
        let e = f.error
        if e.sqlState == "23505" && e.constraint == "idempotency_records_pkey" {
            throw PostgresError.retryable("idempotency key stored by a concurrent request; retrying")
        }
        if e.sqlState == "55P03" { throw inUse }
    }

    /// The error of a key used again with a different request (rule 3).
    public static var reused: DomainError {
        DomainError(
            status: 422, code: "IDEMPOTENCY_KEY_REUSED", message: "idempotency_key was already used with a different request",
            details: ["field": "idempotency_key"])
    }

    /// The error of a claim that waited `lock_timeout` for a concurrent holder of its key.
    public static var inUse: DomainError {
        DomainError(
            status: 409, code: "IDEMPOTENCY_KEY_IN_USE",
            message: "another request with this idempotency_key is still being processed; retry shortly",
            details: ["field": "idempotency_key"])
    }

    /// Stores the response of the claimed key; sealed under `seal` when it holds a secret.
    public static func complete(
        _ c: PostgresConnection, tenantId: String, endpoint: String, key: String,
        response: StoredResponse, seal: AESGCM?
    ) throws {
        let plain: [UInt8]? = seal == nil ? response.body : nil
        let sealed: [UInt8]? = try seal.map { try $0.seal(response.body, associatedData: aad(tenantId, endpoint, key)) }
        try c.execute(
            """
            UPDATE idempotency_records SET status_code = $4, response_body = $5, response_sealed = $6
             WHERE tenant_id = $1 AND endpoint = $2 AND key = $3
            """, [tenantId, endpoint, key, response.status, plain, sealed])
    }

    /// Forgets the records of `endpoint` whose key starts with `keyPrefix`, so those requests
    /// are no longer replayed (e.g. the registrations of an installation that was retired).
    /// Returns how many went.
    @discardableResult
    public static func forget(_ c: PostgresConnection, tenantId: String, endpoint: String, keyPrefix: String) throws -> Int {
        try c.execute(
            """
            DELETE FROM idempotency_records WHERE tenant_id = $1 AND endpoint = $2 AND left(key, length($3)) = $3
            """, [tenantId, endpoint, keyPrefix])
    }

    /// `claim` for operator requests (no tenant): table `operator_idempotency_records`, the
    /// response always sealed. Returns the stored response to replay, or nil (do the work).
    /// - Throws: `DomainError` 422 `IDEMPOTENCY_KEY_REUSED`, 409 `IDEMPOTENCY_KEY_IN_USE`.
    public static func claimOperator(
        _ c: PostgresConnection, endpoint: String, key: String, requestHash: String, kek: AESGCM
    ) throws -> StoredResponse? {
        let inserted = try insertedClaim {
            try c.query(
                """
                INSERT INTO operator_idempotency_records (key, endpoint, request_hash, status_code, expires_at)
                VALUES ($1, $2, $3, 0, now() + make_interval(secs => $4)) ON CONFLICT DO NOTHING RETURNING 1 AS one
                """, ["\(endpoint)|\(key)", endpoint, requestHash, retentionSeconds])
        }
        if inserted { return nil }
        guard
            let row = try c.query(
                """
                SELECT request_hash, status_code, response_sealed, expires_at < now() AS expired FROM operator_idempotency_records WHERE key = $1
                """, ["\(endpoint)|\(key)"]
            ).first
        else { throw PostgresError.retryable }
        if try row.bool("expired") {
            try c.execute("DELETE FROM operator_idempotency_records WHERE key = $1", ["\(endpoint)|\(key)"])
            throw PostgresError.retryable
        }
        guard try row.string("request_hash") == requestHash else {
            throw reused
        }
        guard let sealed = try row.optionalBytes("response_sealed") else { throw PostgresError.retryable }
        return StoredResponse(
            status: try row.int("status_code"),
            body: try kek.open(sealed, associatedData: Array("operator-idempotency|\(endpoint)|\(key)".utf8)))
    }

    /// Stores the operator response of a claimed key, sealed.
    public static func completeOperator(_ c: PostgresConnection, endpoint: String, key: String, response: StoredResponse, kek: AESGCM) throws {
        let sealed = try kek.seal(response.body, associatedData: Array("operator-idempotency|\(endpoint)|\(key)".utf8))
        try c.execute(
            "UPDATE operator_idempotency_records SET status_code = $2, response_sealed = $3 WHERE key = $1",
            ["\(endpoint)|\(key)", response.status, sealed])
    }

    /// Deletes records past their retention (system scope). Returns how many went.
    public static func purgeExpired(_ c: PostgresConnection) throws -> Int {
        let operatorRecords = try c.execute("DELETE FROM operator_idempotency_records WHERE expires_at < now()")
        return operatorRecords + (try c.execute("DELETE FROM idempotency_records WHERE expires_at < now()"))
    }

    static func aad(_ t: String, _ e: String, _ k: String) -> [UInt8] { Array("idempotency|\(t)|\(e)|\(k)".utf8) }
}

extension PostgresError {
    /// A serialization failure stand-in: makes `PostgresPool.transaction` run the body again.
    static var retryable: PostgresError { retryable("idempotency record vanished; retrying") }

    /// `retryable` saying `message` (what made the transaction run again): SQLSTATE 40001, which
    /// `PostgresPool.transaction` answers by running the body again.
    public static func retryable(_ message: String) -> PostgresError {
        PostgresError(kind: .query, message: message, sqlState: "40001")
    }
}
