import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// Everything a handler needs, built once by the composition root.
public final class APIContext: Sendable {
    public let db: Database
    public let auth: Authenticator
    /// AES-256-GCM under `LIVERELAY_KEK`: seals stored secrets and replayable credentials.
    public let kek: AESGCM
    public let log: Logger
    public let metrics: MetricsRegistry
    /// Migrations directory, for `/readyz` ("migrations current").
    public let migrator: Migrator?
    /// The clock (injected in tests).
    public let now: @Sendable () -> Date
    /// Wakes long-polls (`wait_until_ready_ms`, `wait_ms`); started by the composition root.
    public let events: EventWaiter
    /// `LIVERELAY_DEFAULT_EXPIRATION_SECONDS` (docs/providers.md).
    public let defaultExpirationSeconds: Int
    /// Per-tenant caps on installations and live targets (docs/security.md "Per-tenant caps").
    public let limits: TenantLimits
    /// `LIVERELAY_RETENTION_DAYS`, reported by capabilities (docs/security.md "Retention").
    public let retentionDays: Int
    /// `LIVERELAY_FCM_URL` (`https://fcm.googleapis.com` by default): an uploaded service
    /// account's `token_uri` may be on this origin or Google's token endpoint, nothing else.
    public let fcmURL: String

    /// `LIVERELAY_WEBHOOK_ALLOW_PRIVATE=1`: webhook URLs may be `http://` and resolve to private
    /// addresses (docs/webhooks.md "Safety").
    public let webhookAllowPrivate: Bool

    /// APNs channel management (docs/channels.md): creating a channel makes its APNs channel first.
    public let channels: any ChannelManaging
    /// Default priority-10 budgets of tenants that set none (`LIVERELAY_PRIORITY10_HOURLY_BUDGET`,
    /// `LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET`; docs/priority-budget.md), reported by capabilities.
    public let priorityBudgets: PriorityBudget.Defaults
    /// The `/readyz` answer, reused for a second (`Readiness.Cache`).
    public let readiness = Readiness.Cache()

    public init(
        db: Database, auth: Authenticator, kek: AESGCM, log: Logger, metrics: MetricsRegistry, migrator: Migrator?,
        events: EventWaiter? = nil, defaultExpirationSeconds: Int = 3600, webhookAllowPrivate: Bool = false,
        now: @escaping @Sendable () -> Date = Date.init,
        limits: TenantLimits = TenantLimits(), retentionDays: Int = TenantLimits.defaultRetentionDays,
        fcmURL: String = "https://fcm.googleapis.com", channels: any ChannelManaging = UnconfiguredChannelManager(),
        priorityBudgets: PriorityBudget.Defaults = .standard
    ) {
        self.channels = channels
        self.priorityBudgets = priorityBudgets
        self.limits = limits
        self.retentionDays = retentionDays
        self.fcmURL = fcmURL
        self.webhookAllowPrivate = webhookAllowPrivate
        self.events = events ?? EventWaiter(log: log)
        self.defaultExpirationSeconds = defaultExpirationSeconds
        self.db = db
        self.auth = auth
        self.kek = kek
        self.log = log
        self.metrics = metrics
        self.migrator = migrator
        self.now = now
    }
}

extension DomainError {
    /// The docs/http-conventions.md error envelope for this domain error.
    var http: HTTPError { HTTPError(status: status, code: code, message: message, details: details) }
}

/// Handler plumbing shared by every endpoint: error mapping, authorisation guards, body
/// reading, idempotent transactions and list parameters.
enum Endpoint {
    /// Runs `body`, mapping `DomainError` to its envelope and database outages to
    /// `503 SERVICE_UNAVAILABLE` (the database's own message is logged, never returned).
    static func run(_ ctx: APIContext, _ req: HTTPRequest, _ body: () throws -> HTTPResponse) throws -> HTTPResponse {
        do {
            return try body()
        } catch let e as DomainError {
            throw e.http
        } catch let e as PostgresError where e.sqlState == "55P03" {
            ctx.log.warning("lock wait timed out", ["request_id": .string(req.requestId)])
            throw HTTPError(
                status: 503, code: "SERVICE_UNAVAILABLE", message: "the object is busy with other writes; retry shortly",
                headers: [("Retry-After", "1")])
        } catch let e as PostgresError where e.kind == .connection || e.kind == .poolTimeout || e.kind == .closed {
            ctx.log.error("database unavailable", ["request_id": .string(req.requestId), "error": .string(e.message)])
            throw HTTPError(
                status: 503, code: "SERVICE_UNAVAILABLE", message: "the database is unavailable; retry shortly",
                headers: [("Retry-After", "1")])
        }
    }

    static func forbidden(_ message: String) -> DomainError {
        DomainError(status: 403, code: "PERMISSION_DENIED", message: message)
    }

    static func notFound(_ what: String) -> DomainError {
        DomainError(status: 404, code: "NOT_FOUND", message: "\(what) not found")
    }

    /// The tenant of a master key, else 403.
    static func requireMaster(_ p: Principal) throws -> (tenantId: String, keyId: String) {
        guard case .master(let t, let k) = p else { throw forbidden("this endpoint needs a master key, not a \(p.kindName)") }
        return (t, k)
    }

    /// The operator key id, else 403.
    static func requireOperator(_ p: Principal) throws -> String {
        guard case .operatorKey(let id) = p else { throw forbidden("this endpoint needs an operator key, not a \(p.kindName)") }
        return id
    }

    /// `?limit=` (1–200, default 50) and `?cursor=` (docs/http-conventions.md lists).
    static func listParameters(_ req: HTTPRequest) throws -> (limit: Int, after: String?) {
        var limit = 50
        if let l = req.query["limit"] {
            guard let v = Int(l), (1...200).contains(v) else { throw DomainError.invalid("limit", "limit must be an integer from 1 to 200") }
            limit = v
        }
        var after: String?
        if let c = req.query["cursor"], !c.isEmpty {
            guard let id = Cursor.decode(c) else { throw DomainError.invalid("cursor", "cursor is not one this API returned") }
            after = id
        }
        return (limit, after)
    }

    /// `{"data": [...], "next_cursor": ...}`.
    static func list<T>(_ page: Page<T>, _ encode: (T) -> JSONValue) -> HTTPResponse {
        .json(200, .object(["data": .array(page.items.map(encode)), "next_cursor": page.nextCursor.map(JSONValue.string) ?? .null]))
    }

    /// The page a master-key list endpoint answers: checks the key is a master key, reads
    /// `listParameters` and runs `fetch(connection, tenant, limit, cursor id)` in the tenant's
    /// transaction.
    static func masterPage<T>(
        _ ctx: APIContext, _ req: HTTPRequest,
        _ fetch: (PostgresConnection, _ tenant: String, _ limit: Int, _ cursor: String?) throws -> Page<T>
    ) throws -> Page<T> {
        let (tenant, _) = try requireMaster(ctx.auth.authenticate(req))
        let (limit, cursor) = try listParameters(req)
        return try ctx.db.tenant(tenant) { c in try fetch(c, tenant, limit, cursor) }
    }

    /// `POST …/{id}/revoke` of a credential for a master key: the body is empty or
    /// `{idempotency_key?}` (accepted and unused: revoking is idempotent). Runs `revoke(connection,
    /// tenant, id)` in the tenant's transaction, audits `<objectType>.revoke`, announces the
    /// invalidation to every node (`CredentialLookup`) and returns the revoked record.
    /// - Throws: `404 NOT_FOUND` naming `what` when `revoke` finds no such credential.
    static func revokeCredential<R>(
        _ ctx: APIContext, _ req: HTTPRequest, what: String, objectType: String,
        _ revoke: (PostgresConnection, _ tenant: String, _ id: String) throws -> R?
    ) throws -> R {
        let (tenant, actor) = try requireMaster(ctx.auth.authenticate(req))
        let id = req.pathParameters["id"] ?? ""
        var (r, _) = try reader(req, allowEmpty: true)
        _ = try r.optionalString("idempotency_key", maxLength: 255)
        try r.finish()
        return try ctx.db.tenant(tenant) { c -> R in
            guard let k = try revoke(c, tenant, id) else { throw notFound(what) }
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "\(objectType).revoke", objectType: objectType,
                objectId: id, requestId: req.requestId)
            try CredentialLookup.announceInvalidation(c, subject: id)
            return k
        }
    }

    /// Runs `work` once per idempotency key when the request sent one (`idempotent`; `seal`
    /// stores the response encrypted), else once in the tenant's transaction without storing
    /// anything; answers `work`'s status and body.
    static func idempotentIfKeyed(
        _ ctx: APIContext, _ req: HTTPRequest, tenantId: String, key: String?, body: JSONValue, seal: Bool,
        work: (PostgresConnection) throws -> (Int, JSONValue)
    ) throws -> HTTPResponse {
        if let key { return try idempotent(ctx, req, tenantId: tenantId, key: key, body: body, seal: seal, work: work) }
        let (status, value) = try ctx.db.tenant(tenantId, work)
        return .json(status, value)
    }

    /// The request body as an object reader, or an empty object when there is no body.
    static func reader(_ req: HTTPRequest, allowEmpty: Bool = false) throws -> (RequestReader, JSONValue) {
        if allowEmpty && req.body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return (try RequestReader(.object([:])), .object([:]))
        }
        let v = try req.jsonBody()
        return (try RequestReader(v), v)
    }

    /// Runs a mutating request exactly once per (tenant, endpoint, idempotency key) (docs/http-conventions.md):
    /// replays the stored response with its original status and body plus
    /// `Idempotent-Replayed: true` (a replayed creation answers 201 again, docs/write-path.md
    /// "Idempotent replays"), `422 IDEMPOTENCY_KEY_REUSED` for a
    /// different request under the same key. `seal` stores the response encrypted (it holds
    /// a secret). `before` (optional) runs first in the same transaction, for the rules that
    /// precede idempotency; `work` runs inside the tenant's transaction and returns status and body.
    static func idempotent(
        _ ctx: APIContext, _ req: HTTPRequest, tenantId: String, key: String, body: JSONValue, seal: Bool,
        retentionSeconds: Double = IdempotencyStore.retentionSeconds,
        before: ((PostgresConnection) throws -> Void)? = nil,
        work: (PostgresConnection) throws -> (Int, JSONValue)
    ) throws -> HTTPResponse {
        let endpoint = req.idempotencyEndpoint
        let hash = Digest.sha256Hex(body.serialized())
        return try ctx.db.tenant(tenantId) { c in
            try before?(c)  // rules that precede idempotency (docs/write-semantics.md rules 1–2), in the same transaction
            if let stored = try IdempotencyStore.claim(
                c, tenantId: tenantId, endpoint: endpoint, key: key, requestHash: hash, kek: ctx.kek,
                retentionSeconds: retentionSeconds)
            {
                return HTTPResponse(
                    status: stored.status, headers: [("Content-Type", "application/json"), ("Idempotent-Replayed", "true")],
                    body: stored.body)
            }
            let (status, value) = try work(c)
            let bytes = value.serialized()
            try IdempotencyStore.complete(
                c, tenantId: tenantId, endpoint: endpoint, key: key,
                response: StoredResponse(status: status, body: bytes), seal: seal ? ctx.kek : nil)
            return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: bytes)
        }
    }
}

/// JSON helpers for response objects.
enum J {
    static func ts(_ d: Date?) -> JSONValue { d.map { .string(Timestamp.format($0)) } ?? .null }
    static func str(_ s: String?) -> JSONValue { s.map(JSONValue.string) ?? .null }
    static func strs(_ a: [String]) -> JSONValue { .array(a.map(JSONValue.string)) }
}

extension HTTPRequest {
    /// The endpoint part of an idempotency scope (docs/http-conventions.md "Idempotency"):
    /// method and percent-decoded path (`canonicalPath`), e.g. `"POST /v1/installations"`.
    var idempotencyEndpoint: String { "\(method) \(canonicalPath)" }
}
