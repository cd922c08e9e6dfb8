import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// SPEC §4 senders / §5: remote start, update and end, each committed (target + operation +
/// queue entry) in one transaction before the `202 {operation, target}` answer, with the rules
/// checked in SPEC order.
enum LifecycleHandlers {
    static func register(_ r: Router, _ ctx: APIContext) {
        r.add("POST", "/v1/remote-updates/live-activities/start") { req in try Endpoint.run(ctx, req) { try start(ctx, req) } }
        r.add("POST", "/v1/remote-updates/live-activities/update") { req in try Endpoint.run(ctx, req) { try update(ctx, req) } }
        r.add("POST", "/v1/remote-updates/live-activities/end") { req in try Endpoint.run(ctx, req) { try end(ctx, req) } }
    }

    /// Idempotency keys of writes are kept as long as their operation (SPEC §3); ten years here.
    static let writeKeyRetentionSeconds: Double = 10 * 365 * 86400

    /// `?wait_ms=0..10000` (SPEC §5).
    static func waitMs(_ req: HTTPRequest) throws -> Int {
        guard let s = req.query["wait_ms"] else { return 0 }
        guard let v = Int(s), (0...10_000).contains(v) else { throw DomainError.invalid("wait_ms", "wait_ms must be an integer from 0 to 10000") }
        return v
    }

    static func senderScope(_ p: Principal, for what: String) throws -> (String, SenderScope) {
        guard case .sender(let tenant, let scope) = p else {
            throw Endpoint.forbidden("\(what) needs a sender key, not a \(p.kindName)")
        }
        return (tenant, scope)
    }

    static func notFoundTarget() -> DomainError { Endpoint.notFound("target") }

    /// Rule 1 for update/end: the target must exist in the tenant (else 404) and be covered (else 403).
    static func checkCoverage(_ c: PostgresConnection, tenant: String, scope: SenderScope?, targetId: String, action: TargetAction) throws -> TargetRecord {
        guard let t = try TargetStore.get(c, tenantId: tenant, id: targetId, forUpdate: true) else { throw notFoundTarget() }
        if let scope, !Coverage.allows(scope, action, on: t.ownership) {
            if !Coverage.covers(scope, t.ownership) { throw Endpoint.forbidden("this sender key does not cover target \(targetId)") }
            throw Endpoint.forbidden("this sender key lacks the activities:\(action == .update ? "update" : "end") permission")
        }
        return t
    }

    // MARK: start

    static func start(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try senderScope(try ctx.auth.authenticate(req), for: "start")
        let body = try req.jsonBody()
        let stId = try WriteRequests.startTargetId(body)
        guard Coverage.canStart(scope, startTargetId: stId) else {
            throw Endpoint.forbidden(scope.permissions.contains(.start)
                ? "this sender key does not name start target \(stId) in its targets"
                : "this sender key lacks the activities:start permission")
        }
        let s = try WriteRequests.start(body)
        let now = ctx.now()
        try WriteRules.checkStartStaleAt(s.options.staleAt, now: now)
        try WriteRules.checkExpiresAt(s.options.expiresAt, now: now)
        let wait = try waitMs(req)
        let resp = try Endpoint.idempotent(ctx, req, tenantId: tenant, key: s.idempotencyKey, body: body, seal: false,
                                           retentionSeconds: writeKeyRetentionSeconds) { c in
            guard let st = try TargetStore.startTargetForStart(c, tenantId: tenant, id: stId) else { throw Endpoint.notFound("start target") }
            if st.installationStatus == "retired" {
                throw DomainError(status: 410, code: "INSTALLATION_RETIRED", message: "the start target's installation was disconnected")
            }
            let ready = st.status == "ready" && (st.platform == "android" ? st.hasFCMToken : st.hasPushToStartToken)
            guard ready else {
                throw DomainError(status: 409, code: "TOKEN_PENDING",
                                  message: st.status == "retired" ? "start target \(stId) is retired" : "start target \(stId) has no push-to-start token yet",
                                  details: ["start_target_id": .string(stId), "status": .string(st.status)])
            }
            guard s.templateVersion == st.currentTemplateVersion else {
                throw DomainError(status: 409, code: "TEMPLATE_VERSION_MISMATCH",
                                  message: "template_version does not match the start target's current version",
                                  details: ["field": "template_version", "current_template_version": .string(st.currentTemplateVersion)])
            }
            let alert = try WriteRules.requireStartAlert(s.alert)
            if let bk = s.businessKey, let bg = s.businessGeneration {
                try TargetStore.lockBusiness(c, tenantId: tenant, key: bk, generation: bg)
                if let holder = try TargetStore.byBusiness(c, tenantId: tenant, key: bk, generation: bg) {
                    throw businessConflict(holder.id)
                }
            }
            if let schemaJSON = st.schema {
                try SchemaCache.shared.schema(tenant: tenant, installation: st.installationId, templateVersion: st.currentTemplateVersion,
                                              json: schemaJSON).check(s.state)
            }
            let targetId = Identifier.make(.target)
            try DeliveryPayload.check(platform: st.platform, DeliveryPayload.Content(
                event: .start, targetId: targetId, revision: 1, templateVersion: st.currentTemplateVersion, state: s.state, alert: alert,
                staleAt: s.options.staleAt, relevanceScore: s.options.relevanceScore, dismissAt: nil,
                attributesType: st.attributesType, businessKey: s.businessKey), now: now)
            let day = try reserveQuota(c, tenant: tenant, now: now)
            let target = try TargetStore.insert(c, tenantId: tenant, TargetStore.New(
                id: targetId, installationId: st.installationId, startTargetId: stId, createdByKeyId: scope.keyId, origin: "remote",
                activityType: st.activityType, templateVersion: st.currentTemplateVersion, businessKey: s.businessKey,
                businessGeneration: s.businessGeneration, status: .starting, state: s.state, staleAt: s.options.staleAt,
                relevanceScore: s.options.relevanceScore, tokenStatus: st.platform == "android" ? "registered" : "pending"))
            let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: targetId)
            let op = try OperationStore.insert(c, tenantId: tenant, OperationStore.New(
                id: Identifier.make(.operation), targetId: targetId, seq: seq, kind: .start, revision: 1, state: s.state, alert: alert,
                options: s.options, consumesQuota: true, quotaDay: day, createdByKeyId: scope.keyId, idempotencyKey: s.idempotencyKey))
            return (202, writeBody(op, try TargetStore.get(c, tenantId: tenant, id: target.id)!))
        }
        return try waitIfAsked(ctx, tenant: tenant, response: resp, waitMs: wait)
    }

    static func businessConflict(_ holder: String) -> DomainError {
        DomainError(status: 409, code: "BUSINESS_GENERATION_CONFLICT",
                    message: "business_key/business_generation is already taken by target \(holder); start a new lifecycle with a new business_generation",
                    details: ["target_id": .string(holder)])
    }

    /// Rule 8 quota: checks and reserves one unit of today's quota; returns the day.
    static func reserveQuota(_ c: PostgresConnection, tenant: String, now: Date) throws -> String {
        let day = QuotaStore.day(now)
        let limit = try c.query("SELECT daily_push_quota FROM tenants WHERE tenant_id = $1", [tenant])[0].int64("daily_push_quota")
        let usage = try QuotaStore.usage(c, tenantId: tenant, day: day)
        try WriteRules.checkQuota(limit: limit, reserved: usage.reserved, used: usage.used, now: now)
        try QuotaStore.reserve(c, tenantId: tenant, day: day)
        try EventStore.quotaReserved(c, tenantId: tenant, day: day, limit: limit, used: usage.used, reserved: usage.reserved + 1, resetsAt: WriteRules.quotaResetsAt(now))
        return day
    }

    // MARK: update

    static func update(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try senderScope(try ctx.auth.authenticate(req), for: "update")
        let body = try req.jsonBody()
        let targetId = try WriteRequests.targetId(body)
        let wait = try waitMs(req)
        let now = ctx.now()
        var parsed: UpdateRequest?
        var locked: TargetRecord?
        // One transaction: rule 1 (coverage, on the target named in the body), rule 2 (shape),
        // rule 3 (idempotency), then the rest.
        let resp = try Endpoint.idempotent(ctx, req, tenantId: tenant, key: body["idempotency_key"]?.stringValue ?? "", body: body, seal: false,
                                           retentionSeconds: writeKeyRetentionSeconds, before: { c in
            locked = try checkCoverage(c, tenant: tenant, scope: scope, targetId: targetId, action: .update)
            let u = try WriteRequests.update(body)
            try WriteRules.checkExpiresAt(u.options.expiresAt, now: now)
            parsed = u
        }) { c in
            let u = parsed!, t = locked!
            try WriteRules.checkWritable(t.status, statelessEnd: false)
            try WriteRules.checkRevision(expected: u.expectedRevision, current: t.revision)
            try WriteRules.checkSourceVersion(u.sourceVersion, last: t.sourceVersion)
            try checkState(c, tenant: tenant, target: t, state: u.state)
            let platform = try SchemaCache.shared.platform(tenant: tenant, installation: t.installationId) {
                try TargetStore.installationPlatform(c, tenantId: tenant, installationId: t.installationId)
            }
            let revision = t.revision + 1
            try DeliveryPayload.check(platform: platform, DeliveryPayload.Content(
                event: .update, targetId: t.id, revision: revision, templateVersion: t.templateVersion ?? "", state: u.state, alert: u.alert,
                staleAt: u.options.staleAt ?? t.staleAt, relevanceScore: u.options.relevanceScore ?? t.relevanceScore, dismissAt: nil), now: now)
            let day = try reserveQuota(c, tenant: tenant, now: now)
            let opId = Identifier.make(.operation)
            let queued = try OperationStore.queued(c, tenantId: tenant, targetId: t.id)
            let victims = WriteRules.superseded(by: .update, hasState: true, queued: queued.map(queuedView))
            try TargetStore.applyState(c, tenantId: tenant, id: t.id, revision: revision, state: u.state, sourceVersion: u.sourceVersion,
                                       staleAt: u.options.staleAt, relevanceScore: u.options.relevanceScore, status: nil)
            let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: t.id)
            var opts = u.options
            opts.staleAt = u.options.staleAt ?? t.staleAt
            opts.relevanceScore = u.options.relevanceScore ?? t.relevanceScore
            let op = try OperationStore.insert(c, tenantId: tenant, OperationStore.New(
                id: opId, targetId: t.id, seq: seq, kind: .update, revision: revision, state: u.state, alert: u.alert, options: opts,
                consumesQuota: true, quotaDay: day, createdByKeyId: scope.keyId, idempotencyKey: u.idempotencyKey))
            try OperationStore.supersede(c, tenantId: tenant, ids: victims, by: opId)
            return (202, writeBody(op, try TargetStore.get(c, tenantId: tenant, id: t.id)!))
        }
        return try waitIfAsked(ctx, tenant: tenant, response: resp, waitMs: wait)
    }

    static func queuedView(_ o: OperationRecord) -> QueuedOperation {
        QueuedOperation(id: o.id, kind: o.kind, hasState: o.hasState, hasAlert: o.hasAlert)
    }

    /// Rule 8 state: the pinned schema of the target's template version, when it has one.
    static func checkState(_ c: PostgresConnection, tenant: String, target t: TargetRecord, state: JSONValue) throws {
        guard let tv = t.templateVersion,
              let schema = try SchemaCache.shared.schema(tenant: tenant, installation: t.installationId, templateVersion: tv, load: {
                  try TargetStore.templateSchema(c, tenantId: tenant, installationId: t.installationId, templateVersion: tv)
              }) else { return }
        try schema.check(state)
    }

    // MARK: end

    static func end(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let p = try ctx.auth.authenticate(req)
        let tenant: String, scope: SenderScope?
        switch p {
        case .sender(let t, let s): tenant = t; scope = s
        case .master(let t, _): tenant = t; scope = nil
        default: throw Endpoint.forbidden("end needs a sender key (or a master key for a stateless end), not a \(p.kindName)")
        }
        let body = try req.jsonBody()
        let targetId = try WriteRequests.targetId(body)
        let wait = try waitMs(req)
        let now = ctx.now()
        var parsed: EndRequest?
        var locked: TargetRecord?
        let resp = try Endpoint.idempotent(ctx, req, tenantId: tenant, key: body["idempotency_key"]?.stringValue ?? "", body: body, seal: false,
                                           retentionSeconds: writeKeyRetentionSeconds, before: { c in
            locked = try checkCoverage(c, tenant: tenant, scope: scope, targetId: targetId, action: .end)
            let e = try WriteRequests.end(body)
            if scope == nil && e.state != nil {
                throw Endpoint.forbidden("a master key may only end without new state (cleanup); use a sender key to send a final state")
            }
            try WriteRules.checkDismissAt(e.dismissAt, now: now)
            try WriteRules.checkExpiresAt(e.expiresAt, now: now)
            parsed = e
        }) { c in
            let e = parsed!, t = locked!
            let opId = Identifier.make(.operation)
            guard let state = e.state else {
                // Rule 9: cleanup. Already over → 200 with a cancelled operation that sends nothing.
                if t.status.isTerminal {
                    let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: t.id)
                    let op = try OperationStore.insert(c, tenantId: tenant, OperationStore.New(
                        id: opId, targetId: t.id, seq: seq, kind: .end, status: .cancelled, pendingReason: "already_ended",
                        revision: t.revision, state: nil, alert: nil, options: WriteOptions(expiresAt: e.expiresAt), dismissAt: e.dismissAt,
                        consumesQuota: false, quotaDay: nil, createdByKeyId: scope?.keyId, idempotencyKey: e.idempotencyKey))
                    return (200, writeBody(op, t))
                }
                return (202, try queueEnd(c, tenant: tenant, target: t, opId: opId, state: nil, revision: t.revision, e: e, scope: scope, day: nil))
            }
            try WriteRules.checkWritable(t.status, statelessEnd: false)
            try WriteRules.checkRevision(expected: e.expectedRevision!, current: t.revision)
            try checkState(c, tenant: tenant, target: t, state: state)
            let platform = try TargetStore.installationPlatform(c, tenantId: tenant, installationId: t.installationId)
            try DeliveryPayload.check(platform: platform, DeliveryPayload.Content(
                event: .end, targetId: t.id, revision: t.revision + 1, templateVersion: t.templateVersion ?? "", state: state, alert: nil,
                staleAt: t.staleAt, relevanceScore: t.relevanceScore, dismissAt: e.dismissAt), now: now)
            let day = try reserveQuota(c, tenant: tenant, now: now)
            try TargetStore.applyState(c, tenantId: tenant, id: t.id, revision: t.revision + 1, state: state, sourceVersion: nil,
                                       staleAt: nil, relevanceScore: nil, status: nil)
            return (202, try queueEnd(c, tenant: tenant, target: t, opId: opId, state: state, revision: t.revision + 1, e: e, scope: scope, day: day))
        }
        return try waitIfAsked(ctx, tenant: tenant, response: resp, waitMs: wait)
    }

    /// Queues an end (superseding every queued update) and moves the target to `ending`.
    static func queueEnd(_ c: PostgresConnection, tenant: String, target t: TargetRecord, opId: String, state: JSONValue?, revision: Int64,
                         e: EndRequest, scope: SenderScope?, day: String?) throws -> JSONValue {
        let queued = try OperationStore.queued(c, tenantId: tenant, targetId: t.id)
        let victims = WriteRules.superseded(by: .end, hasState: state != nil, queued: queued.map(queuedView))
        let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: t.id)
        let op = try OperationStore.insert(c, tenantId: tenant, OperationStore.New(
            id: opId, targetId: t.id, seq: seq, kind: .end, revision: revision, state: state, alert: nil,
            options: WriteOptions(staleAt: t.staleAt, relevanceScore: t.relevanceScore, expiresAt: e.expiresAt), dismissAt: e.dismissAt,
            consumesQuota: state != nil, quotaDay: day, createdByKeyId: scope?.keyId, idempotencyKey: e.idempotencyKey))
        try OperationStore.supersede(c, tenantId: tenant, ids: victims, by: opId)
        try TargetStore.setStatus(c, tenantId: tenant, id: t.id, status: .ending)
        try c.notify(OperationStore.eventsChannel, payload: t.id)
        return writeBody(op, try TargetStore.get(c, tenantId: tenant, id: t.id)!)
    }

    /// `{operation, target}` of a write (SPEC §5).
    static func writeBody(_ op: OperationRecord, _ t: TargetRecord) -> JSONValue {
        .object(["operation": Encode.operation(op), "target": Encode.target(t)])
    }

    /// `?wait_ms`: waits for the operation to leave `queued`/`sending`, then answers with
    /// its current state (same status code).
    static func waitIfAsked(_ ctx: APIContext, tenant: String, response: HTTPResponse, waitMs: Int) throws -> HTTPResponse {
        guard waitMs > 0, let v = try? JSONValue.parse(response.body), let opId = v["operation"]?["id"]?.stringValue,
              let targetId = v["target"]?["id"]?.stringValue else { return response }
        var op: OperationRecord?
        _ = try ctx.events.wait(for: opId, timeoutSeconds: Double(waitMs) / 1000) {
            op = try ctx.db.tenant(tenant) { c in try OperationStore.get(c, tenantId: tenant, id: opId) }
            return op?.status.isFinal ?? true
        }
        guard let op, let t = try ctx.db.tenant(tenant, { c in try TargetStore.get(c, tenantId: tenant, id: targetId) }) else { return response }
        var r = HTTPResponse.json(response.status, writeBody(op, t))
        r.headers += response.headers.filter { $0.0.lowercased() == "idempotent-replayed" }
        return r
    }
}
