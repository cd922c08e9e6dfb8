import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md device endpoints beyond registration (installation credential): prepare start
/// targets, push-to-start tokens, binding retire, render reports.
///
/// Decisions (see also the issue note):
/// - A retired binding stays retired (docs/endpoints.md "script deleted/replaced"; the source text: keeping
///   the old template files cannot restore that identity): preparing it again answers
///   `409 BINDING_RETIRED`; the device uses a new `binding_id` for the new script.
/// - A push-to-start token for a retired start target → `409 START_TARGET_RETIRED`; for an
///   Android start target (no push-to-start tokens, docs/providers.md) → `400 INVALID_REQUEST` field `token`.
/// - Every endpoint answers `410 INSTALLATION_RETIRED` for a disconnected installation, and
///   `404 NOT_FOUND` for another installation's (or tenant's) objects.
enum DeviceHandlers {
    static func bindingRetired(_ id: String) -> DomainError {
        DomainError(
            status: 409, code: "BINDING_RETIRED",
            message: "binding \(id) was retired; a replaced script prepares under a new binding_id",
            details: ["field": "binding_id"])
    }

    /// `POST /v1/installations/{id}/start-targets` (prepare, docs/endpoints.md, docs/templates.md, docs/limits.md) →
    /// `201` (new start target) or `200` `{id, start_target_id, template_version, status, …,
    /// evicted_template_versions}`. Upserts the binding, stores the template version when new
    /// (evicting the oldest collectable versions of the binding when over 64 versions or
    /// 256 MiB, else `409 TEMPLATE_RETENTION_LIMIT`), and points the start target of
    /// (binding, activity_type) at it. Starts nothing. `idempotency_key` is optional: the
    /// request is idempotent by content anyway.
    static func prepare(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        let json = try req.jsonBody()
        let m = try PrepareManifest.parse(json)
        if me.retired { throw InstallationHandlers.retiredError() }
        let tv = m.templateVersion(sha256: Digest.sha256)
        let work = { (c: PostgresConnection) throws -> (Int, JSONValue) in try prepareWork(ctx, c, me.tenant, me.id, m, tv) }
        if let key = m.idempotencyKey {
            return try Endpoint.idempotent(ctx, req, tenantId: me.tenant, key: key, body: json, seal: false, work: work)
        }
        let (status, value) = try ctx.db.tenant(me.tenant, work)
        return .json(status, value)
    }

    static func prepareWork(
        _ ctx: APIContext, _ c: PostgresConnection, _ tenant: String, _ installationId: String,
        _ m: PrepareManifest, _ tv: String
    ) throws -> (Int, JSONValue) {
        let now = ctx.now()
        guard let inst = try InstallationStore.get(c, tenantId: tenant, id: installationId, forUpdate: true) else {
            throw Endpoint.notFound("installation")
        }
        if inst.status == "retired" { throw InstallationHandlers.retiredError() }
        let (binding, _) = try BindingStore.upsertLocked(c, tenantId: tenant, installationId: installationId, id: m.bindingId)
        if binding.status == "retired" { throw bindingRetired(m.bindingId) }

        var evicted: [String] = []
        if try TemplateStore.get(c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId, id: tv) == nil {
            let existing = try RetentionStore.bindingVersions(c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId, now: now)
            let toEvict: [Retention.Version]
            do {
                toEvict = try Retention.admit(existing: existing, newBytes: Int64(m.bundleBytes), now: now)
            } catch let e as DomainError {
                var d = e.details
                d["binding_id"] = .string(m.bindingId)
                throw DomainError(status: e.status, code: e.code, message: e.message, details: d)
            }
            for v in toEvict {
                try TemplateStore.delete(c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId, id: v.id)
                evicted.append(v.id)
                ctx.log.info(
                    "template version evicted",
                    [
                        "tenant_id": .string(tenant), "installation_id": .string(installationId), "binding_id": .string(m.bindingId),
                        "template_version": .string(v.id), "bytes": .int(v.bytes),
                        "last_reference_ended_at": J.ts(v.lastReferenceEndedAt ?? v.createdAt)
                    ])
            }
            try TemplateStore.insert(
                c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId, version: newVersion(m, tv), now: now)
        }

        let status: Int
        var st: StartTargetRecord
        if let existing = try StartTargetStore.find(
            c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId,
            activityType: m.activityType)
        {
            st = existing
            if st.currentTemplateVersion != tv {
                try TemplateStore.release(
                    c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId,
                    id: st.currentTemplateVersion, at: now)
                try TemplateStore.unrelease(c, tenantId: tenant, installationId: installationId, bindingId: m.bindingId, id: tv)
                st = try StartTargetStore.setCurrentVersion(c, tenantId: tenant, id: st.id, templateVersion: tv, now: now)
            }
            status = 200
        } else {
            // A new (binding, activity type): bounded per installation, counted under the
            // installation's row lock (docs/security.md "Per-tenant caps"); a refusal rolls back
            // the binding and template version stored above with the rest of the transaction.
            let held = try StartTargetStore.countActive(c, tenantId: tenant, installationId: installationId)
            if held >= TenantLimits.maxStartTargetsPerInstallation {
                throw TenantLimits.installationStartTargetsExceeded(limit: TenantLimits.maxStartTargetsPerInstallation, actual: held)
            }
            let initial = inst.platform == "android" && inst.fcmToken != nil ? "ready" : "pending"
            st = try StartTargetStore.insert(
                c, tenantId: tenant, id: Identifier.make(.startTarget, now: now), installationId: installationId,
                bindingId: m.bindingId, activityType: m.activityType, templateVersion: tv, status: initial, now: now)
            status = 201
        }
        var out = startTarget(st, platform: inst.platform, attributesType: m.attributesType)
        if case .object(var o) = out {
            o["evicted_template_versions"] = J.strs(evicted)
            out = .object(o)
        }
        return (status, out)
    }

    static func newVersion(_ m: PrepareManifest, _ tv: String) -> NewTemplateVersion {
        NewTemplateVersion(
            id: tv, activityType: m.activityType, attributesType: m.attributesType, rendererDigest: m.rendererDigest,
            schema: m.schemaJSON,
            resources: .array(
                m.resources.map {
                    .object(["path": .string($0.path), "sha256": .string($0.sha256), "bytes": .int(Int64($0.bytes))])
                }),
            bundleBytes: m.bundleBytes, bundleModules: m.bundleModules, bundleFiles: m.bundleFiles)
    }

    /// `PUT /v1/installations/{id}/start-targets/{st}/push-to-start-token {token}` → 200, the
    /// start target `ready`. The token is stored, never echoed or logged (a fingerprint is).
    static func pushToStartToken(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        let stId = req.pathParameters["st"] ?? ""
        var (r, _) = try Endpoint.reader(req)
        let token = try r.string("token", maxLength: 4096)
        _ = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        try checkToken(token)
        if me.retired { throw InstallationHandlers.retiredError() }
        let (st, platform) = try ctx.db.tenant(me.tenant) { c -> (StartTargetRecord, String) in
            guard let inst = try InstallationStore.get(c, tenantId: me.tenant, id: me.id) else { throw Endpoint.notFound("installation") }
            if inst.status == "retired" { throw InstallationHandlers.retiredError() }
            guard let st = try StartTargetStore.get(c, tenantId: me.tenant, id: stId, forUpdate: true), st.installationId == me.id else {
                throw Endpoint.notFound("start target")
            }
            if st.status == "retired" {
                throw DomainError(
                    status: 409, code: "START_TARGET_RETIRED",
                    message: "start target \(stId) was retired with its binding; prepare again under a new binding_id")
            }
            if inst.platform == "android" {
                throw DomainError.invalid(
                    "token",
                    "Android start targets have no push-to-start token; they are ready once the installation's FCM token is registered (PUT /v1/installations/{id}/fcm-token)"
                )
            }
            return (try StartTargetStore.setPushToStartToken(c, tenantId: me.tenant, id: stId, token: token, now: ctx.now()), inst.platform)
        }
        ctx.log.info(
            "push-to-start token registered",
            [
                "tenant_id": .string(me.tenant), "installation_id": .string(me.id), "start_target_id": .string(st.id),
                "token_fingerprint": .string(tokenFingerprint(token)), "request_id": .string(req.requestId)
            ])
        return .json(200, startTarget(st, platform: platform))
    }

    /// Push-to-start tokens are APNs device tokens: even-length hex (`APNsToken.check`),
    /// else `400 INVALID_REQUEST` naming `token`.
    static func checkToken(_ token: String) throws {
        try APNsToken.check(token)
    }

    /// `sha256:` + the first 16 hex digits of SHA-256 of the token: enough to tell tokens
    /// apart in logs and responses, useless for sending.
    static func tokenFingerprint(_ token: String) -> String {
        "sha256:" + String(Digest.sha256Hex(Array(token.utf8)).prefix(16))
    }

    /// `POST /v1/installations/{id}/bindings/{bnd}/retire` → 200 the binding, `retired`, with
    /// its start targets (all retired). Idempotent.
    static func retireBinding(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        let bindingId = req.pathParameters["bnd"] ?? ""
        var (r, _) = try Endpoint.reader(req, allowEmpty: true)
        _ = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        if me.retired { throw InstallationHandlers.retiredError() }
        let (b, ids) = try ctx.db.tenant(me.tenant) { c -> (BindingRecord, [String]) in
            guard let inst = try InstallationStore.get(c, tenantId: me.tenant, id: me.id, forUpdate: true) else {
                throw Endpoint.notFound("installation")
            }
            if inst.status == "retired" { throw InstallationHandlers.retiredError() }
            guard let done = try BindingStore.retire(c, tenantId: me.tenant, installationId: me.id, id: bindingId, now: ctx.now()) else {
                throw Endpoint.notFound("binding")
            }
            return (done.0, done.startTargetIds)
        }
        return .json(
            200,
            .object([
                "id": .string(b.id), "object": "binding", "binding_id": .string(b.id), "installation_id": .string(b.installationId),
                "status": .string(b.status), "start_target_ids": J.strs(ids), "created_at": J.ts(b.createdAt), "retired_at": J.ts(b.retiredAt)
            ]))
    }

    /// The start target response object (never the token itself).
    static func startTarget(_ st: StartTargetRecord, platform: String, attributesType: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(st.id), "object": "start_target", "start_target_id": .string(st.id), "installation_id": .string(st.installationId),
            "binding_id": .string(st.bindingId), "activity_type": .string(st.activityType), "template_version": .string(st.currentTemplateVersion),
            "status": .string(st.status), "platform": .string(platform),
            "push_to_start_token_registered": .bool(st.pushToStartToken != nil),
            "push_to_start_token_fingerprint": st.pushToStartToken.map { .string(tokenFingerprint($0)) } ?? .null,
            "created_at": J.ts(st.createdAt), "updated_at": J.ts(st.updatedAt)
        ]
        if let attributesType { o["attributes_type"] = .string(attributesType) }
        return .object(o)
    }
}
