import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md device endpoints on targets (installation credential): local start reservation,
/// update-token registration, explicit creation failure, local end.
enum DeviceTargetHandlers {
    /// `POST /v1/installations/{id}/targets`: a local start reserves its business instance
    /// → 201 target `reserved`, revision 1. Idempotent per installation (the scope includes
    /// the installation id, not the credential, so it survives credential renewal).
    static func reserve(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        let body = try req.jsonBody()
        let r = try WriteRequests.reservation(body)
        if me.retired { throw InstallationHandlers.retiredError() }
        return try Endpoint.idempotent(
            ctx, req, tenantId: me.tenant, key: r.idempotencyKey, body: body, seal: false,
            retentionSeconds: LifecycleHandlers.writeKeyRetentionSeconds
        ) { c in
            guard let inst = try InstallationStore.get(c, tenantId: me.tenant, id: me.id, forUpdate: true) else {
                throw Endpoint.notFound("installation")
            }
            if inst.status == "retired" { throw InstallationHandlers.retiredError() }
            try TargetStore.lockBusiness(c, tenantId: me.tenant, key: r.businessKey, generation: r.businessGeneration)
            if let holder = try TargetStore.byBusiness(c, tenantId: me.tenant, key: r.businessKey, generation: r.businessGeneration) {
                throw LifecycleHandlers.businessConflict(holder.id, visible: holder.installationId == me.id)
            }
            let pinned = try TargetStore.currentTemplate(c, tenantId: me.tenant, installationId: me.id, activityType: r.activityType)
            if let schema = pinned?.1 { try StateSchema.compile(schema).check(r.state) }
            let join = try r.channelId.map { ch in
                try ChannelJoin.decide(
                    c, tenant: me.tenant, channelId: ch,
                    joiner: ChannelJoin.Joiner(
                        installationId: me.id, appId: inst.appId, activityType: r.activityType,
                        attributesType: try pinned.flatMap {
                            try ChannelStore.templateAttributesType(
                                c, tenantId: me.tenant, installationId: me.id,
                                templateVersion: $0.0)
                        },
                        schema: pinned?.1), localStart: true)
            }
            try TenantCapStore.checkInstallationTargets(
                c, tenantId: me.tenant, installationId: me.id, limit: TenantLimits.maxLiveTargetsPerInstallation)
            try TenantCapStore.check(c, tenantId: me.tenant, .liveTargets, limit: ctx.limits.maxLiveTargetsPerTenant)
            let targetId = Identifier.make(.target)
            try WriteRules.checkLocalStartSize(
                attributes: .object(["target_id": .string(targetId), "business_key": .string(r.businessKey)]),
                state: r.state)
            let t = try TargetStore.insert(
                c, tenantId: me.tenant,
                TargetStore.New(
                    id: targetId, installationId: me.id, startTargetId: nil, createdByKeyId: nil, origin: "local", activityType: r.activityType,
                    templateVersion: pinned?.0, businessKey: r.businessKey, businessGeneration: r.businessGeneration, status: .reserved,
                    state: r.state, staleAt: r.staleAt, relevanceScore: r.relevanceScore,
                    tokenStatus: inst.platform == "android" && inst.fcmToken != nil ? "registered" : "pending"))
            if inst.platform == "android" && inst.fcmToken != nil {
                // Android has no per-activity token: the target is ready once the installation has an FCM token (docs/providers.md).
                try TargetStore.setStatus(c, tenantId: me.tenant, id: t.id, status: .ready)
            }
            if let join {
                _ = try c.query(
                    ChannelStore.joinStatement(
                        tenantId: me.tenant, targetId: t.id, channelId: join.channel.id, delivery: join.delivery,
                        channelSeq: join.channel.opSeq, ready: join.delivery == "broadcast"))
            }
            return (201, Encode.target(try TargetStore.get(c, tenantId: me.tenant, id: t.id)!))
        }
    }

    /// The installation's own target `tgt`, locked; another installation's → 404. The
    /// installation's status is read from the database (not the credential cache), so a
    /// disconnect is seen at once: retired → `410 INSTALLATION_RETIRED`.
    static func ownTarget(_ c: PostgresConnection, tenant: String, installation: String, id: String) throws -> TargetRecord {
        if try InstallationStore.get(c, tenantId: tenant, id: installation)?.status != "active" { throw InstallationHandlers.retiredError() }
        guard Identifier.isValid(id, kind: .target), let t = try TargetStore.get(c, tenantId: tenant, id: id, forUpdate: true),
            t.installationId == installation
        else { throw Endpoint.notFound("target") }
        return t
    }

    /// `PUT …/targets/{tgt}/push-token {token}`: a new update token replaces the old one
    /// (tokens rotate); a waiting target becomes `ready`. An ended target never takes one
    /// (`409 TARGET_ENDED`), a retired installation neither (`410 INSTALLATION_RETIRED`).
    /// An `ending` target does take it (and stays `ending`): its queued end goes to that token,
    /// and without it the end would wait for a token forever (docs/write-semantics.md excludes only `ended`).
    static func pushToken(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        var (r, _) = try Endpoint.reader(req)
        let token = try r.string("token", maxLength: 512)
        try APNsToken.check(token)  // update tokens are APNs tokens (Android targets take none)
        _ = try r.optionalString("idempotency_key", maxLength: 255)
        try r.finish()
        if me.retired { throw InstallationHandlers.retiredError() }
        let t = try ctx.db.tenant(me.tenant) { c -> TargetRecord in
            let t = try ownTarget(c, tenant: me.tenant, installation: me.id, id: req.pathParameters["tgt"] ?? "")
            if t.status.isTerminal {
                throw DomainError(
                    status: 409, code: "TARGET_ENDED", message: "target \(t.id) is \(t.status.rawValue); its token is not replaced",
                    details: ["status": .string(t.status.rawValue)])
            }
            let updated = try TargetStore.setPushToken(c, tenantId: me.tenant, id: t.id, token: token)
            try c.notify(OperationStore.eventsChannel, payload: t.id)
            try c.notify(OperationStore.dispatchChannel, payload: me.tenant)  // queued updates may now go out
            return updated
        }
        return .json(200, Encode.target(t))
    }

    /// `POST …/creation-failed`: ActivityKit reported the activity could not be created.
    static func creationFailed(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        try finish(ctx, req, status: .creationFailed, reason: nil, cancelReason: "creation_failed")
    }

    /// `POST …/ended`: the activity ended on the device (offline-first); queued work is cancelled.
    static func ended(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        try finish(ctx, req, status: .ended, reason: "device", cancelReason: "ended_on_device")
    }

    static func finish(_ ctx: APIContext, _ req: HTTPRequest, status: TargetStatus, reason: String?, cancelReason: String) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        var (r, _) = try Endpoint.reader(req, allowEmpty: true)
        _ = try r.optionalString("idempotency_key", maxLength: 255)
        try r.finish()
        if me.retired { throw InstallationHandlers.retiredError() }
        let t = try ctx.db.tenant(me.tenant) { c -> TargetRecord in
            let t = try ownTarget(c, tenant: me.tenant, installation: me.id, id: req.pathParameters["tgt"] ?? "")
            if t.status.isTerminal { return t }  // idempotent
            if status == .creationFailed
                && !(t.status == .reserved || t.status == .starting || t.status == .tokenPending || t.status == .startUnknown)
            {
                throw DomainError(
                    status: 409, code: "TARGET_ENDED",
                    message: "target \(t.id) is \(t.status.rawValue); creation can no longer fail",
                    details: ["status": .string(t.status.rawValue)])
            }
            try OperationStore.cancelQueued(c, tenantId: me.tenant, targetId: t.id, reason: cancelReason)
            try TargetStore.setStatus(c, tenantId: me.tenant, id: t.id, status: status, endReason: reason)
            try c.notify(OperationStore.eventsChannel, payload: t.id)
            return try TargetStore.get(c, tenantId: me.tenant, id: t.id)!
        }
        return .json(200, Encode.target(t))
    }
}
