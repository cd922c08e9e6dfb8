import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md tenant admin: master keys (rotation), publishable keys, audit events.
enum MasterKeyHandlers {
    /// Longest grace period for a master-key revocation (30 days, in seconds).
    static let maxGraceSeconds: Int64 = 30 * 86400

    /// `POST /v1/master-keys {label?, idempotency_key}` → 201 with the credential (rotation step 1).
    static func createMaster(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, body) = try Endpoint.reader(req)
        let label = try r.optionalString("label", maxLength: 200) ?? ""
        let key = try r.idempotencyKey()
        try r.finish()
        let minted = try ctx.auth.mint(.master, tenant: tenant)  // argon2 in a limiter slot, before the transaction
        return try Endpoint.idempotent(ctx, req, tenantId: tenant, key: key, body: body, seal: true) { c in
            let k = try KeyStore.insertMasterKey(c, tenantId: tenant, id: minted.id, label: label, secretHash: minted.secretHash, createdBy: actor)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "master_key.create", objectType: "master_key",
                objectId: k.id, requestId: req.requestId, details: ["label": .string(label)])
            return (201, Encode.masterKey(k, now: ctx.now(), credential: minted.token))
        }
    }

    static func listMaster(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let page = try Endpoint.masterPage(ctx, req) { c, tenant, limit, after in
            try KeyStore.listMasterKeys(c, tenantId: tenant, limit: limit, after: after)
        }
        return Endpoint.list(page) { [now = ctx.now()] in Encode.masterKey($0, now: now) }
    }

    /// `POST /v1/master-keys/{id}/revoke {expires_in_seconds?}`: now, or after a grace period
    /// (rotation step 2). The last master key that would still work → `409 LAST_MASTER_KEY`.
    static func revokeMaster(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let id = req.pathParameters["id"] ?? ""
        var (r, _) = try Endpoint.reader(req, allowEmpty: true)
        let grace = try r.optionalInt("expires_in_seconds", 0...maxGraceSeconds) ?? 0
        _ = try r.optionalString("idempotency_key", maxLength: 255)
        try r.finish()
        let (k, dbNow) = try ctx.db.tenant(tenant) { c -> (MasterKeyRecord, Date) in
            let unrevoked = try KeyStore.lockUnrevokedMasterKeyIds(c, tenantId: tenant)
            guard let existing = try KeyStore.masterKey(c, tenantId: tenant, id: id, forUpdate: true) else { throw Endpoint.notFound("master key") }
            // The database's clock decides (it is the one credential checks compare with), so
            // "revoke now" takes effect now even when this node's clock runs ahead.
            let dbNow = try KeyStore.databaseNow(c)
            let expires = dbNow.addingTimeInterval(Double(grace))
            if unrevoked.contains(id) {
                if unrevoked == [id] {
                    throw DomainError(
                        status: 409, code: "LAST_MASTER_KEY",
                        message: "this is the tenant's last active master key; create another before revoking it")
                }
            } else if !(existing.expiresAt.map { $0 > expires } ?? false) {
                return (existing, dbNow)  // already revoked, stopping no later than asked: idempotent
            }
            // New revocation, or one that cuts a running grace period short (a key found leaked
            // mid-rotation must be stoppable at once); a later expiry never extends an earlier one.
            guard let k = try KeyStore.revokeMasterKey(c, tenantId: tenant, id: id, expiresAt: expires) else { throw Endpoint.notFound("master key") }
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "master_key.revoke", objectType: "master_key",
                objectId: id, requestId: req.requestId, details: ["expires_in_seconds": .int(grace)])
            try CredentialLookup.announceInvalidation(c, subject: id)
            return (k, dbNow)
        }
        return .json(200, Encode.masterKey(k, now: dbNow))
    }

    /// `POST /v1/publishable-keys {app_id, platform, label?, idempotency_key?}` → 201 with the credential.
    static func createPublishable(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, body) = try Endpoint.reader(req)
        let appId = try r.string("app_id", maxLength: 255)
        let platform = try r.enumValue("platform", ["ios", "android"])
        let label = try r.optionalString("label", maxLength: 200) ?? ""
        let key = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        let minted = try ctx.auth.mint(.publishable, tenant: tenant)  // argon2 in a limiter slot, before the transaction
        let work = { (c: PostgresConnection) throws -> (Int, JSONValue) in
            let k = try KeyStore.insertPublishableKey(
                c, tenantId: tenant, id: minted.id, appId: appId, platform: platform,
                label: label, secretHash: minted.secretHash, createdBy: actor)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "publishable_key.create", objectType: "publishable_key",
                objectId: k.id, requestId: req.requestId, details: ["app_id": .string(appId), "platform": .string(platform)])
            return (201, Encode.publishableKey(k, credential: minted.token))
        }
        return try Endpoint.idempotentIfKeyed(ctx, req, tenantId: tenant, key: key, body: body, seal: true, work: work)
    }

    static func listPublishable(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let page = try Endpoint.masterPage(ctx, req) { c, tenant, limit, after in
            try KeyStore.listPublishableKeys(c, tenantId: tenant, limit: limit, after: after)
        }
        return Endpoint.list(page) { Encode.publishableKey($0) }
    }

    static func revokePublishable(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let k = try Endpoint.revokeCredential(ctx, req, what: "publishable key", objectType: "publishable_key") { c, tenant, id in
            try KeyStore.revokePublishableKey(c, tenantId: tenant, id: id)
        }
        return .json(200, Encode.publishableKey(k))
    }

    /// `GET /v1/audit-events`: newest first, keyset-paginated.
    static func listAudit(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let page = try Endpoint.masterPage(ctx, req) { c, tenant, limit, before in
            try AuditStore.list(c, tenantId: tenant, limit: limit, before: before)
        }
        return Endpoint.list(page, Encode.auditEvent)
    }
}
