import Foundation
import Locking
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md sender reads: target (with `wait_until_ready_ms` long-poll), snapshot, operations,
/// listTargets, usage.
enum TargetReadHandlers {
    /// A reader of target metadata: a sender key (coverage decides per target) or a master key
    /// (all of its tenant's metadata, never business state).
    static func reader(_ ctx: APIContext, _ req: HTTPRequest) throws -> (tenant: String, scope: SenderScope?) {
        let p = try ctx.auth.authenticate(req)
        switch p {
        case .sender(let t, let s): return (t, s)
        case .master(let t, _): return (t, nil)
        default: throw Endpoint.forbidden("reading targets needs a sender or master key, not a \(p.kindName)")
        }
    }

    /// Loads a target the reader may see with `action`: absent or another tenant's → 404,
    /// not covered → 403.
    static func visibleTarget(_ ctx: APIContext, tenant: String, scope: SenderScope?, id: String, action: TargetAction) throws -> TargetRecord {
        guard Identifier.isValid(id, kind: .target),
            let t = try ctx.db.tenant(tenant, { c in try TargetStore.get(c, tenantId: tenant, id: id) })
        else { throw Endpoint.notFound("target") }
        if let scope, !Coverage.allows(scope, action, on: t.ownership) {
            throw Endpoint.forbidden(
                Coverage.covers(scope, t.ownership)
                    ? "this sender key lacks the permission for this read" : "this sender key does not cover target \(id)")
        }
        return t
    }

    /// `GET …/targets/{tgt}[?wait_until_ready_ms=0..60000]`: a plain read answers 200 whatever
    /// the status; with a wait, it long-polls (woken by NOTIFY) until `ready`, else
    /// `409 TOKEN_PENDING` (the activity is neither cancelled nor restarted).
    static func get(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try reader(ctx, req)
        let id = req.pathParameters["tgt"] ?? ""
        var waitMs: Int?
        if let w = req.query["wait_until_ready_ms"] {
            guard let v = Int(w), (0...60_000).contains(v) else {
                throw DomainError.invalid("wait_until_ready_ms", "wait_until_ready_ms must be an integer from 0 to 60000")
            }
            waitMs = v
        }
        let t = try visibleTarget(ctx, tenant: tenant, scope: scope, id: id, action: .readMetadata)
        guard let waitMs else { return .json(200, Encode.target(t, now: ctx.now())) }
        @Sendable func pending(_ t: TargetRecord) -> DomainError {
            DomainError(
                status: 409, code: "TOKEN_PENDING",
                message: "target \(id) is \(t.status.rawValue), not ready, after waiting \(waitMs) ms",
                details: ["status": .string(t.status.rawValue), "target_id": .string(id)])
        }
        if t.status == .ready { return .json(200, Encode.target(t, now: ctx.now())) }
        if t.status.isTerminal || waitMs == 0 { throw pending(t) }
        // Long-poll without holding a worker thread (docs/http-limits.md, "Long-polls").
        let latest = Locked<TargetRecord>(t)
        return LongPoll.respond(
            ctx, req, key: id, timeoutSeconds: Double(waitMs) / 1000,
            check: {
                if let fresh = try ctx.db.tenant(tenant, { c in try TargetStore.get(c, tenantId: tenant, id: id) }) { latest.withLock { $0 = fresh } }
                let t = latest.withLock { $0 }
                return t.status == .ready || t.status.isTerminal
            },
            render: { result in
                let ready = try result.get()
                let t = latest.withLock { $0 }
                if ready && t.status == .ready { return .json(200, Encode.target(t, now: ctx.now())) }
                throw pending(t)
            }, refused: { throw LongPoll.tooMany(ctx.events.maxWaitsPerCredential) })
    }

    /// `GET …/snapshot`: business state, needs `activities:read-state` (a master key may not).
    static func snapshot(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try reader(ctx, req)
        guard let scope else { throw Endpoint.forbidden("a snapshot holds business state: it needs a sender key with activities:read-state") }
        let t = try visibleTarget(ctx, tenant: tenant, scope: scope, id: req.pathParameters["tgt"] ?? "", action: .readState)
        return .json(200, Encode.snapshot(t))
    }

    static func operations(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try reader(ctx, req)
        let t = try visibleTarget(ctx, tenant: tenant, scope: scope, id: req.pathParameters["tgt"] ?? "", action: .readMetadata)
        let (limit, before) = try Endpoint.listParameters(req)
        let page = try ctx.db.tenant(tenant) { c in
            try OperationStore.listForTarget(c, tenantId: tenant, targetId: t.id, limit: limit, before: before)
        }
        return Endpoint.list(page, Encode.operation)
    }

    static func operation(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try reader(ctx, req)
        let id = req.pathParameters["op"] ?? ""
        guard Identifier.isValid(id, kind: .operation),
            let op = try ctx.db.tenant(tenant, { c in try OperationStore.get(c, tenantId: tenant, id: id) })
        else { throw Endpoint.notFound("operation") }
        _ = try visibleTarget(ctx, tenant: tenant, scope: scope, id: op.targetId, action: .readMetadata)
        return .json(200, Encode.operation(op))
    }

    /// listTargets: filters `status`, `business_key`, `installation_id`, `start_target_id`;
    /// a sender key sees only what it covers; no business state.
    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try reader(ctx, req)
        if let scope, scope.permissions.isEmpty { throw Endpoint.forbidden("this sender key has no permissions") }
        let (limit, after) = try Endpoint.listParameters(req)
        if let s = req.query["status"], TargetStatus(rawValue: s) == nil {
            throw DomainError.invalid("status", "status must be one of \(TargetStatus.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let filter = TargetFilter(
            status: req.query["status"], businessKey: req.query["business_key"],
            installationId: req.query["installation_id"], startTargetId: req.query["start_target_id"], coverage: scope)
        let page = try ctx.db.tenant(tenant) { c in try TargetStore.list(c, tenantId: tenant, filter: filter, limit: limit, after: after) }
        return Endpoint.list(page) { Encode.target($0, now: ctx.now()) }
    }

    /// `GET /v1/remote-updates/usage`: today's (UTC) quota.
    static func usage(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try reader(ctx, req)
        let now = ctx.now()
        let day = QuotaStore.day(now)
        let (limit, u) = try ctx.db.tenant(tenant) { c in
            (
                try c.query("SELECT daily_push_quota FROM tenants WHERE tenant_id = $1", [tenant])[0].int64("daily_push_quota"),
                try QuotaStore.usage(c, tenantId: tenant, day: day)
            )
        }
        return .json(
            200,
            [
                "day": .string(day), "limit": .int(limit), "used": .int(u.used), "reserved": .int(u.reserved),
                "remaining": .int(max(0, limit - u.used - u.reserved)),
                "resets_at": .string(Timestamp.format(WriteRules.quotaResetsAt(now)))
            ])
    }
}
