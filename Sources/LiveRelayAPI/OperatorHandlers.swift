import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md operator endpoints (operator key): create, list, read and change tenants.
enum OperatorHandlers {
    /// Body limits shared with the admin CLI.
    static let maxQuota: Int64 = 1_000_000_000
    static let defaultQuota: Int64 = 10_000

    /// `POST /v1/operator/tenants {name, daily_push_quota?}` → 201 `{tenant, master_key, publishable_key}`
    /// with both secrets shown once.
    static func create(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let op = try Endpoint.requireOperator(ctx.auth.authenticate(req))
        var (r, _) = try Endpoint.reader(req)
        let name = try r.string("name", maxLength: 200)
        let quota = try r.optionalInt("daily_push_quota", 0...maxQuota) ?? defaultQuota
        let key = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        guard let key else {
            let created = try TenantProvisioning.create(ctx.db, name: name, dailyPushQuota: quota, actorId: op, requestId: req.requestId)
            return .json(201, created.json(now: ctx.now()))
        }
        // docs/http-conventions.md: the same key replays the same tenant and the same (sealed) credentials.
        let hash = Digest.sha256Hex(try req.jsonBody().serialized())
        return try ctx.db.system { c in
            if let stored = try IdempotencyStore.claimOperator(c, endpoint: "POST /v1/operator/tenants", key: key, requestHash: hash, kek: ctx.kek) {
                return HTTPResponse(
                    status: stored.status, headers: [("Content-Type", "application/json"), ("Idempotent-Replayed", "true")], body: stored.body)
            }
            let created = try TenantProvisioning.create(c, name: name, dailyPushQuota: quota, actorId: op, requestId: req.requestId)
            let body = created.json(now: ctx.now()).serialized()
            try IdempotencyStore.completeOperator(
                c, endpoint: "POST /v1/operator/tenants", key: key, response: StoredResponse(status: 201, body: body), kek: ctx.kek)
            return HTTPResponse(status: 201, headers: [("Content-Type", "application/json")], body: body)
        }
    }

    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        _ = try Endpoint.requireOperator(ctx.auth.authenticate(req))
        let (limit, after) = try Endpoint.listParameters(req)
        let page = try ctx.db.system { c in try TenantStore.list(c, limit: limit, after: after) }
        return Endpoint.list(page, Encode.tenant)
    }

    static func get(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        _ = try Endpoint.requireOperator(ctx.auth.authenticate(req))
        let id = req.pathParameters["id"] ?? ""
        guard let t = try ctx.db.system({ c in try TenantStore.get(c, id: id) }) else { throw Endpoint.notFound("tenant") }
        return .json(200, Encode.tenant(t))
    }

    /// `PATCH /v1/operator/tenants/{id} {name?, daily_push_quota?, status?,
    /// priority10_hourly_budget?, frequent_updates_hourly_budget?}`; a status change reaches
    /// every node's credential cache through NOTIFY. The budgets are integers 0–1000
    /// (docs/priority-budget.md); anything else → `400 INVALID_REQUEST` naming the field.
    static func patch(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let op = try Endpoint.requireOperator(ctx.auth.authenticate(req))
        let id = req.pathParameters["id"] ?? ""
        var (r, _) = try Endpoint.reader(req)
        let name = try r.optionalString("name", minLength: 1, maxLength: 200)
        let quota = try r.optionalInt("daily_push_quota", 0...maxQuota)
        let status = try r.optionalEnum("status", ["active", "suspended"])
        let budgetRange = Int64(0)...Int64(PriorityBudget.maxBudget)
        let p10 = try r.optionalInt("priority10_hourly_budget", budgetRange)
        let frequent = try r.optionalInt("frequent_updates_hourly_budget", budgetRange)
        _ = try r.optionalString("idempotency_key", maxLength: 255)
        try r.finish()
        let t = try ctx.db.system { c -> TenantRecord in
            guard let before = try TenantStore.get(c, id: id) else { throw Endpoint.notFound("tenant") }
            guard
                let t = try TenantStore.update(
                    c, id: id, name: name, dailyPushQuota: quota, status: status,
                    priority10HourlyBudget: p10, frequentUpdatesHourlyBudget: frequent)
            else {
                throw Endpoint.notFound("tenant")
            }
            var changes: [String: JSONValue] = [:]
            if let name { changes["name"] = .string(name) }
            if let quota { changes["daily_push_quota"] = .int(quota) }
            if let status { changes["status"] = .string(status) }
            if let p10 { changes["priority10_hourly_budget"] = .int(p10) }
            if let frequent { changes["frequent_updates_hourly_budget"] = .int(frequent) }
            try AuditStore.record(
                c, tenantId: id, actorId: op, action: "tenant.update", objectType: "tenant", objectId: id,
                requestId: req.requestId, details: changes)
            if before.status != t.status { try CredentialLookup.announceInvalidation(c, subject: "tenant:\(id)") }
            return t
        }
        // A new limit applies to this process's next write at once; other processes' readings
        // stand in for at most QuotaHints.maxAgeSeconds, and only far from the limit.
        if quota != nil { QuotaHints.shared.forget(tenantId: id) }
        return .json(200, Encode.tenant(t))
    }
}

/// Creating a tenant with its first master key and an any-app publishable key; shared by the
/// API and `liverelay admin tenants create` (docs/configuration.md).
public enum TenantProvisioning {
    /// The new tenant and its credentials (secrets in clear: show once, never store).
    public struct Created: Sendable {
        public let tenant: TenantRecord
        public let masterKey: MasterKeyRecord
        public let masterCredential: String
        public let publishableKey: PublishableKeyRecord
        public let publishableCredential: String

        /// `{"tenant": …, "master_key": {id, credential, …}, "publishable_key": {id, credential, …}}`.
        public func json(now: Date) -> JSONValue {
            .object([
                "tenant": Encode.tenant(tenant),
                "master_key": Encode.masterKey(masterKey, now: now, credential: masterCredential),
                "publishable_key": Encode.publishableKey(publishableKey, credential: publishableCredential)
            ])
        }
    }

    /// Creates the tenant, its first master key and an any-app publishable key in one
    /// transaction, with audit events naming `actorId`.
    public static func create(_ db: Database, name: String, dailyPushQuota: Int64, actorId: String, requestId: String) throws -> Created {
        try db.system { c in try create(c, name: name, dailyPushQuota: dailyPushQuota, actorId: actorId, requestId: requestId) }
    }

    /// The same inside the caller's system-scope transaction.
    public static func create(_ c: PostgresConnection, name: String, dailyPushQuota: Int64, actorId: String, requestId: String) throws -> Created {
        let master = try CredentialMint.make(.master)
        let publishable = try CredentialMint.make(.publishable)
        let tenantId = Identifier.make(.tenant)
        do {
            let t = try TenantStore.insert(c, id: tenantId, name: name, dailyPushQuota: dailyPushQuota)
            let mk = try KeyStore.insertMasterKey(
                c, tenantId: tenantId, id: master.id, label: "first master key",
                secretHash: master.secretHash, createdBy: actorId)
            let pk = try KeyStore.insertPublishableKey(
                c, tenantId: tenantId, id: publishable.id, appId: nil, platform: nil,
                label: "default", secretHash: publishable.secretHash, createdBy: actorId)
            try AuditStore.record(
                c, tenantId: tenantId, actorId: actorId, action: "tenant.create", objectType: "tenant",
                objectId: tenantId, requestId: requestId,
                details: ["name": .string(name), "daily_push_quota": .int(dailyPushQuota)])
            try AuditStore.record(
                c, tenantId: tenantId, actorId: actorId, action: "master_key.create", objectType: "master_key",
                objectId: mk.id, requestId: requestId)
            try AuditStore.record(
                c, tenantId: tenantId, actorId: actorId, action: "publishable_key.create",
                objectType: "publishable_key", objectId: pk.id, requestId: requestId)
            return Created(
                tenant: t, masterKey: mk, masterCredential: master.token, publishableKey: pk,
                publishableCredential: publishable.token)
        }
    }
}
