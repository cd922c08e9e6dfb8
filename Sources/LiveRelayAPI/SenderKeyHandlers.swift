import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md tenant admin: sender keys (docs/credentials.md coverage fields).
enum SenderKeyHandlers {
    /// Most ids one key may name in `targets` or `created_from`.
    static let maxIds = 1000

    /// The validated body of a sender-key creation.
    struct Body {
        var targets: [String], createdFrom: [String], permissions: [String], label: String, expiresAt: Date?, key: String
    }

    /// Parses and checks the body: known permissions (at least one), well-formed ids
    /// (`targets`: `st_`/`tgt_`; `created_from`: `st_`), at least one id, `expires_at` in the future.
    static func parse(_ r: inout RequestReader, now: Date) throws -> Body {
        let perms = try r.optionalStringArray("permissions", maxCount: Permission.allCases.count, maxLength: 64)
        guard let perms, !perms.isEmpty else {
            throw DomainError.invalid(
                "permissions", "permissions must list at least one of \(Permission.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        for (i, p) in perms.enumerated() where Permission(rawValue: p) == nil {
            throw DomainError.invalid(
                "permissions.\(i)", "unknown permission \(p.debugDescription); known: \(Permission.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let targets = try r.optionalStringArray("targets", maxCount: maxIds, maxLength: 64) ?? []
        for (i, t) in targets.enumerated()
        where !(Identifier.isValid(t, kind: .startTarget) || Identifier.isValid(t, kind: .target) || Identifier.isValid(t, kind: .channel)) {
            throw DomainError.invalid("targets.\(i)", "targets.\(i) must be a start target id (st_…), a target id (tgt_…) or a channel id (ch_…)")
        }
        let createdFrom = try r.optionalStringArray("created_from", maxCount: maxIds, maxLength: 64) ?? []
        for (i, t) in createdFrom.enumerated() where !Identifier.isValid(t, kind: .startTarget) {
            throw DomainError.invalid("created_from.\(i)", "created_from.\(i) must be a start target id (st_…)")
        }
        if targets.isEmpty && createdFrom.isEmpty {
            throw DomainError.invalid("targets", "a sender key must name at least one id in targets or created_from")
        }
        let label = try r.optionalString("label", maxLength: 200) ?? ""
        let expiresAt = try r.optionalTimestamp("expires_at")
        if let e = expiresAt, e <= now { throw DomainError.invalid("expires_at", "expires_at must be in the future") }
        let key = try r.idempotencyKey()
        try r.finish()
        return Body(targets: targets, createdFrom: createdFrom, permissions: perms.sorted(), label: label, expiresAt: expiresAt, key: key)
    }

    /// `POST /v1/remote-updates/sender-keys` → 201 `{id, credential, …}`; a replay returns the
    /// same credential (stored sealed for 24 h, docs/http-conventions.md).
    static func create(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, json) = try Endpoint.reader(req)
        let b = try parse(&r, now: ctx.now())
        let minted = try ctx.auth.mint(.sender, tenant: tenant)  // argon2 in a limiter slot, before the transaction
        return try Endpoint.idempotent(ctx, req, tenantId: tenant, key: b.key, body: json, seal: true) { c in
            let found = try ObjectIds.existing(c, tenantId: tenant, ids: b.targets + b.createdFrom)
            if let (i, id) = b.targets.enumerated().first(where: { !found.contains($0.element) }) {
                throw DomainError.invalid("targets.\(i)", "targets.\(i): no start target, target or channel \(id) in this tenant")
            }
            if let (i, id) = b.createdFrom.enumerated().first(where: { !found.contains($0.element) }) {
                throw DomainError.invalid("created_from.\(i)", "created_from.\(i): no start target \(id) in this tenant")
            }
            let k = try KeyStore.insertSenderKey(
                c, tenantId: tenant, id: minted.id, label: b.label, secretHash: minted.secretHash,
                targets: b.targets, createdFrom: b.createdFrom, permissions: b.permissions,
                createdBy: actor, expiresAt: b.expiresAt)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "sender_key.create", objectType: "sender_key",
                objectId: k.id, requestId: req.requestId,
                details: [
                    "permissions": J.strs(b.permissions), "targets": J.strs(b.targets),
                    "created_from": J.strs(b.createdFrom)
                ])
            return (201, Encode.senderKey(k, now: ctx.now(), credential: minted.token))
        }
    }

    static func get(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let id = req.pathParameters["id"] ?? ""
        guard let k = try ctx.db.tenant(tenant, { c in try KeyStore.senderKey(c, tenantId: tenant, id: id) }) else {
            throw Endpoint.notFound("sender key")
        }
        return .json(200, Encode.senderKey(k, now: ctx.now()))
    }

    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let page = try Endpoint.masterPage(ctx, req) { c, tenant, limit, after in
            try KeyStore.listSenderKeys(c, tenantId: tenant, limit: limit, after: after)
        }
        return Endpoint.list(page) { [now = ctx.now()] in Encode.senderKey($0, now: now) }
    }

    /// `POST /v1/remote-updates/sender-keys/{id}/revoke`: stops working on every node within 1 s.
    static func revoke(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let k = try Endpoint.revokeCredential(ctx, req, what: "sender key", objectType: "sender_key") { c, tenant, id in
            try KeyStore.revokeSenderKey(c, tenantId: tenant, id: id)
        }
        return .json(200, Encode.senderKey(k, now: ctx.now()))
    }
}
