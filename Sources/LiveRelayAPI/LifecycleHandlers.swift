import Foundation
import Crypto
import Locking
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md senders / §5: remote start, update and end, each committed (target + operation +
/// queue entry) in one transaction before the `202 {operation, target}` answer, with the rules
/// checked in the documented rule order (docs/write-semantics.md).
enum LifecycleHandlers {
    /// Idempotency keys of writes are kept as long as their operation (docs/write-path.md); ten years here.
    static let writeKeyRetentionSeconds: Double = 10 * 365 * 86400

    /// `?wait_ms=0..10000` (docs/write-semantics.md).
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

    /// Rule 1 for update/end on the locked target: it must exist in the tenant (else 404) and
    /// be covered (else 403).
    static func checkCoverage(_ t: TargetRecord?, scope: SenderScope?, targetId: String, action: TargetAction) throws -> TargetRecord {
        guard let t else { throw notFoundTarget() }
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
            throw Endpoint.forbidden(
                scope.permissions.contains(.start)
                    ? "this sender key does not name start target \(stId) in its targets"
                    : "this sender key lacks the activities:start permission")
        }
        let s = try WriteRequests.start(body)
        if let ch = s.channelId { try ChannelJoin.checkCoverage(scope, channelId: ch) }
        let now = ctx.now()
        try WriteRules.checkStartStaleAt(s.options.staleAt, now: now)
        try WriteRules.checkExpiresAt(s.options.expiresAt, now: now)
        let wait = try waitMs(req)
        let idem = Idempotency(req, key: s.idempotencyKey, body: body)
        let day = QuotaStore.day(now)
        var exactQuota = false
        let opId = Identifier.make(.operation)
        let resp = try ctx.db.tenant(tenant) { c -> HTTPResponse in
            c.transactionLabel = "start"
            // The settings naming the start operation as its head and quota writer ride on the
            // BEGIN's set_config statement: nothing before round trip 2 writes operations.
            let writerSent = c.addPendingSettings(WritePath.writerSettings(operationId: opId))
            // Round trip 1: claim (rule 3), the start target (shared lock), the quota counters,
            // and the business instance's lock and holder when one is named.
            var reads = [idem.claim(tenant), WritePath.lockStartTarget(tenantId: tenant, id: stId)]
            let quota = QuotaRead.plan(tenant: tenant, day: day, into: &reads)
            let business = s.businessKey.flatMap { bk in s.businessGeneration.map { (bk, $0) } }
            let holderIndex = reads.count + 1
            if let (bk, bg) = business {
                reads += [
                    WritePath.lockBusiness(tenantId: tenant, key: bk, generation: bg),
                    WritePath.businessHolder(tenantId: tenant, key: bk, generation: bg)
                ]
            }
            let capIndex = reads.count
            reads.append(TenantCapStore.statement(tenantId: tenant, .liveTargets, limit: ctx.limits.maxLiveTargetsPerTenant))
            let r1 = try c.pipeline(reads)
            if let replay = try idem.replay(r1, at: 0) { return replay }
            guard let st = try WritePath.startTarget(result(r1, 1)) else { throw Endpoint.notFound("start target") }
            if st.installationStatus == "retired" {
                throw DomainError(status: 410, code: "INSTALLATION_RETIRED", message: "the start target's installation was disconnected")
            }
            let ready = st.status == "ready" && (st.platform == "android" ? st.hasFCMToken : st.hasPushToStartToken)
            guard ready else {
                throw DomainError(
                    status: 409, code: "TOKEN_PENDING",
                    message: st.status == "retired" ? "start target \(stId) is retired" : "start target \(stId) has no push-to-start token yet",
                    details: ["start_target_id": .string(stId), "status": .string(st.status)])
            }
            guard s.templateVersion == st.currentTemplateVersion else {
                throw DomainError(
                    status: 409, code: "TEMPLATE_VERSION_MISMATCH",
                    message: "template_version does not match the start target's current version",
                    details: ["field": "template_version", "current_template_version": .string(st.currentTemplateVersion)])
            }
            let alert = try WriteRules.requireStartAlert(s.alert)
            let join = try s.channelId.map { ch in
                try ChannelJoin.decide(
                    c, tenant: tenant, channelId: ch,
                    joiner: ChannelJoin.Joiner(
                        installationId: st.installationId, appId: st.appId, activityType: st.activityType, attributesType: st.attributesType,
                        schema: try st.schema()), localStart: false)
            }
            if let (bk, bg) = business, try WritePath.holder(result(r1, holderIndex)) != nil,
                let holder = try TargetStore.byBusiness(c, tenantId: tenant, key: bk, generation: bg)
            {
                // The conflict path only: one more read to decide whether the caller may see the holder.
                throw businessConflict(holder.id, visible: Coverage.covers(scope, holder.ownership))
            }
            // The stored schema is parsed only when the cache has no compiled one.
            try SchemaCache.shared.schema(
                tenant: tenant, installation: st.installationId, templateVersion: st.currentTemplateVersion, load: { try st.schema() }
            )?.check(s.state)
            let targetId = Identifier.make(.target)
            try DeliveryPayload.check(
                platform: st.platform,
                DeliveryPayload.Content(
                    event: .start, targetId: targetId, revision: 1, templateVersion: st.currentTemplateVersion, state: s.state, alert: alert,
                    staleAt: s.options.staleAt, relevanceScore: s.options.relevanceScore, dismissAt: nil,
                    attributesType: st.attributesType, businessKey: s.businessKey), now: now)
            try TenantCapStore.evaluate(result(r1, capIndex), .liveTargets, limit: ctx.limits.maxLiveTargetsPerTenant)
            let recheck = try checkQuota(c, tenant: tenant, day: day, read: quota.reading(r1), exact: exactQuota, now: now)
            // Round trip 2: the target, its start operation (claimed at commit when a dispatcher
            // of this process lends a slot: docs/delivery.md "Claims at commit"), the quota re-check.
            let claim = CommitClaim.begin(c, db: ctx.db)
            // The claim's prelude and the flag that lets the writes statement skip the insert
            // triggers whose work it does (migration 0047: the live-target count, the reserved
            // unit; docs/write-path.md "The writer's statement skips the triggers") ride on the
            // writer settings' statement, or on one of their own when those rode on the BEGIN; the
            // head joins the writes below (0040).
            var writes = settingsStatements(
                writer: WritePath.writerSettings(operationId: opId), sent: writerSent, claim: claim?.settings(operationId: opId) ?? [],
                statement: WritePath.writerRowsOn)
            let first = writes.count
            let startOp = OperationStore.New(
                id: opId, targetId: targetId, seq: 1, kind: .start, revision: 1, state: s.state, alert: alert,
                options: s.options, consumesQuota: true, quotaDay: day, createdByKeyId: scope.keyId, idempotencyKey: s.idempotencyKey)
            // The target, its operation and (else the claim settles it) its head: one statement
            // (docs/write-path.md "A start's writes in one statement").
            writes.append(
                WritePath.startWrites(
                    tenantId: tenant,
                    target: TargetStore.New(
                        id: targetId, installationId: st.installationId, startTargetId: stId, createdByKeyId: scope.keyId, origin: "remote",
                        activityType: st.activityType, templateVersion: st.currentTemplateVersion, businessKey: s.businessKey,
                        businessGeneration: s.businessGeneration, status: .starting, state: s.state, staleAt: s.options.staleAt,
                        relevanceScore: s.options.relevanceScore, tokenStatus: st.platform == "android" ? "registered" : "pending"),
                    priority10Budget: st.priority10Budget, operation: startOp, withHead: claim == nil))
            // A channel join, the claim and the quota re-read follow (the stored answer and
            // COMMIT in round trip 3): the triggers run for them again.
            writes.append(WritePath.endOfWriterRows)
            let joinIndex = writes.count
            if let join {
                writes.append(
                    ChannelStore.joinStatement(
                        tenantId: tenant, targetId: targetId, channelId: join.channel.id, delivery: join.delivery,
                        channelSeq: join.channel.opSeq, ready: false))
            }
            if let claim { writes.append(claim.claim(tenantId: tenant, operationId: opId)) }  // after the join: it reads the delivery
            let claimIndex = writes.count - 1
            let quotaIndex = writes.count
            if recheck { writes.append(WritePath.readQuota(tenantId: tenant, day: day)) }
            // Further statements of this write (e.g. event rows) join `writes` here.
            let r2 = try c.pipeline(writes).get()
            let target = try WritePath.updatedTarget(r2[join == nil ? first : joinIndex])
            let op = startOp.record(tenantId: tenant, now: target.createdAt)
            if recheck { try recheckQuota(r2[quotaIndex], tenant: tenant, day: day, exactNext: &exactQuota) }
            let beforeCommit = try claim?.read(r2[claimIndex], tenantId: tenant, targetId: targetId) ?? []
            try WritePath.notify(c, tenantId: tenant, queued: claim?.claimedAny != true, superseded: [], targetChanged: nil)
            return try finish(c, tenant: tenant, idem, status: 202, writeBody(op, target), before: beforeCommit, replacingExpired: nil)
        }
        return try waitIfAsked(ctx, tenant: tenant, response: resp, waitMs: wait, req: req)
    }

    /// `409 BUSINESS_GENERATION_CONFLICT`. The holder's id (message and `details.target_id`)
    /// only when `visible`: the caller may read that target (a sender key covering it, the
    /// installation owning it); otherwise the answer must not become an oracle mapping business
    /// keys to other callers' targets (docs/security.md "Business keys").
    static func businessConflict(_ holder: String, visible: Bool) -> DomainError {
        guard visible else {
            return DomainError(
                status: 409, code: "BUSINESS_GENERATION_CONFLICT",
                message: "business_key/business_generation is already taken by another target; start a new lifecycle with a new business_generation",
                details: ["field": "business_generation"])
        }
        return DomainError(
            status: 409, code: "BUSINESS_GENERATION_CONFLICT",
            message: "business_key/business_generation is already taken by target \(holder); start a new lifecycle with a new business_generation",
            details: ["target_id": .string(holder)])
    }

    /// Round trip 1 of update and end: the locked target with its platform, its queued
    /// operations, and — when the body's shape is valid — the idempotency key's record (read in
    /// the target's statement: `key`) and the quota counters (unless a recent reading stands in
    /// for them: `QuotaRead`). Rule 1 (coverage) is decided from it before rule 2 (`shape`) and
    /// rule 3.
    static func readTarget(
        _ c: PostgresConnection, tenant: String, targetId: String, key: (endpoint: String, key: String)?, day: String
    )
        throws -> (PostgresPipelineOutcome, QuotaRead?)
    {
        var reads = [
            WritePath.lockTarget(tenantId: tenant, id: targetId, key: key), WritePath.lockQueued(tenantId: tenant, targetId: targetId)
        ]
        var quota: QuotaRead?
        if key != nil {
            quota = QuotaRead.plan(tenant: tenant, day: day, into: &reads)
        }
        return (try c.pipeline(reads), quota)
    }

    /// What round trip 1 of an update or an end established (`lockForWrite`): its results, the
    /// locked target and its platform, the validated request and its idempotency claim.
    struct LockedWrite<Request> {
        let reads: PostgresPipelineOutcome
        let target: TargetRecord
        let platform: String
        let request: Request
        let idem: Idempotency
        /// The day's quota reading (round trip 1's read or a recent reading).
        let quota: QuotaRead
        /// The id of the operation this write inserts, made before the transaction.
        let operationId: String
        /// The transaction's `now()` (`WritePath.lockTarget`): what the write's rows store as
        /// their times, so its response can be built before round trip 2.
        let now: Date
        /// The key's record was found past its retention: storing the answer replaces it.
        let replacingExpired: Bool
        /// True when the write's `BEGIN` carried the settings naming `operationId` as the head
        /// and quota writer (`WritePath.writerSettings`): `commitQueued` then sends no statement
        /// of its own for them.
        let writerSettingsSent: Bool
    }

    /// How an update or an end goes on after `lockForWrite`.
    enum WriteStart<Request> {
        /// The key's stored response: answer it as it is.
        case replay(HTTPResponse)
        /// A new write on the locked target.
        case locked(LockedWrite<Request>)
    }

    /// Round trip 1 of an update or an end (`readTarget`) and the checks that come first, in
    /// order: rule 1 (the target exists and `scope` covers `action`), rule 2 (the body's `shape`
    /// error, raised only now), the replay of a stored response, and the refusal of a channel
    /// member's target (`ChannelJoin.checkNotMember`).
    static func lockForWrite<Request>(
        _ c: PostgresConnection, tenant: String, targetId: String, scope: SenderScope?, action: TargetAction,
        shape: Result<Request, Error>, idem: Idempotency?, day: String, operationId: String, writerSettingsSent: Bool
    ) throws -> WriteStart<Request> {
        let (r1, quota) = try readTarget(c, tenant: tenant, targetId: targetId, key: idem?.scope, day: day)
        let locked = try WritePath.target(result(r1, 0))
        let t = try checkCoverage(locked?.target, scope: scope, targetId: targetId, action: action)
        let request = try shape.get()
        guard let idem, let quota else { throw PostgresError(kind: .decoding, message: "no idempotency lookup") }
        let found = try idem.looked(result(r1, 0).rows[0])  // a row: checkCoverage found the target
        if case .stored(let stored) = found { return .replay(Idempotency.replayed(stored)) }
        try ChannelJoin.checkNotMember(t)
        return .locked(
            LockedWrite(
                reads: r1, target: t, platform: locked!.platform, request: request, idem: idem, quota: quota, operationId: operationId,
                now: locked!.now, replacingExpired: found == .expired, writerSettingsSent: writerSettingsSent))
    }

    /// The skeleton of an update or an end (docs/write-semantics.md rule order, docs/write-path.md
    /// "Round trips") for `tenant` and `scope`, already authenticated: reads the body, its
    /// `target_id` and `?wait_ms`, decides rule 2 (`shape(body, now)`; its error is raised only
    /// after rule 1), then runs the tenant's transaction (labelled `update` or `end`):
    /// `lockForWrite` (a replay is answered as stored), then `work(connection, locked write, now,
    /// quota day, exactQuota)`. `exactQuota` starts false and keeps its value when the
    /// transaction is run again (`recheckQuota`). Answers `work`'s response through `waitIfAsked`.
    /// - Throws: `400 INVALID_REQUEST` for the body, `target_id` or `wait_ms`; whatever
    ///   `lockForWrite` and `work` throw.
    static func lockedWrite<Request>(
        _ ctx: APIContext, _ req: HTTPRequest, tenant: String, scope: SenderScope?, action: TargetAction,
        key: (Request) -> String, shape: (JSONValue, Date) throws -> Request,
        work: (PostgresConnection, LockedWrite<Request>, _ now: Date, _ day: String, _ exactQuota: inout Bool) throws -> HTTPResponse
    ) throws -> HTTPResponse {
        let body = try req.jsonBody()
        let targetId = try WriteRequests.targetId(body)
        let wait = try waitMs(req)
        let now = ctx.now()
        let day = QuotaStore.day(now)
        // Rule 2 is decided here but raised only after rule 1 (coverage, in the transaction).
        let request = Result { try shape(body, now) }
        let idem = (try? request.get()).map { Idempotency(req, key: key($0), body: body) }
        var exactQuota = false
        let opId = Identifier.make(.operation)
        let resp = try ctx.db.tenant(tenant) { c -> HTTPResponse in
            c.transactionLabel = action == .update ? "update" : "end"
            // The settings naming the operation as its head and quota writer ride on the BEGIN's
            // set_config statement: nothing before `commitQueued` writes operations, and a write
            // that inserts the operation without queuing it (an end of an ended target) changes
            // no head and no quota unit.
            let sent = c.addPendingSettings(WritePath.writerSettings(operationId: opId))
            switch try lockForWrite(
                c, tenant: tenant, targetId: targetId, scope: scope, action: action, shape: request, idem: idem, day: day, operationId: opId,
                writerSettingsSent: sent)
            {
            case .replay(let stored): return stored
            case .locked(let w):
                do {
                    return try work(c, w, now, day, &exactQuota)
                } catch let refusal as DomainError {
                    // Rule 3 comes before the rules that refuse: the key was read in the target's
                    // statement, which keeps the key's row as it read it before waiting for the
                    // target's lock, so a repeat of a write that committed meanwhile saw no
                    // record. Read the key again before refusing (docs/write-path.md "Idempotency").
                    guard let row = try? c.query(w.idem.lookupSQL, w.idem.lookupParams(tenant)).first,
                        case .stored(let stored) = try w.idem.looked(row)
                    else { throw refusal }
                    return Idempotency.replayed(stored)
                }
            }
        }
        return try waitIfAsked(ctx, tenant: tenant, response: resp, waitMs: wait, req: req)
    }

    // MARK: update

    /// Rule 2 of an update (docs/write-semantics.md): the body's shape (`WriteRequests.update`),
    /// then `expires_at` after `now`.
    /// - Throws: `400 INVALID_REQUEST` naming the field.
    static func updateRequest(_ body: JSONValue, now: Date) throws -> UpdateRequest {
        let u = try WriteRequests.update(body)
        try WriteRules.checkExpiresAt(u.options.expiresAt, now: now)
        return u
    }

    static func update(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try senderScope(try ctx.auth.authenticate(req), for: "update")
        return try lockedWrite(ctx, req, tenant: tenant, scope: scope, action: .update, key: \.idempotencyKey, shape: updateRequest) {
            c, w, now, day, exactQuota in
            let (r1, t, u) = (w.reads, w.target, w.request)
            try WriteRules.checkWritable(t.status, statelessEnd: false)
            try WriteRules.checkRevision(expected: u.expectedRevision, current: t.revision)
            try WriteRules.checkSourceVersion(u.sourceVersion, last: t.sourceVersion)
            try checkState(c, tenant: tenant, target: t, state: u.state)
            let revision = t.revision + 1
            try DeliveryPayload.check(
                platform: w.platform,
                DeliveryPayload.Content(
                    event: .update, targetId: t.id, revision: revision, templateVersion: t.templateVersion ?? "", state: u.state, alert: u.alert,
                    staleAt: u.options.staleAt ?? t.staleAt, relevanceScore: u.options.relevanceScore ?? t.relevanceScore, dismissAt: nil), now: now)
            let queued = try WritePath.queued(result(r1, 1))
            let victims = WriteRules.supersededOperations(by: .update, hasState: true, queued: queued)
            let recheck = try checkQuota(
                c, tenant: tenant, day: day, read: w.quota.reading(r1), exact: exactQuota, now: now,
                reserves: WriteRules.reservation(of: day, insertedDay: day, superseded: victims))
            let opId = w.operationId
            var opts = u.options
            opts.staleAt = u.options.staleAt ?? t.staleAt
            opts.relevanceScore = u.options.relevanceScore ?? t.relevanceScore
            return try commitQueued(
                c, db: ctx.db, tenant: tenant, target: t,
                targetWrite: .state(
                    revision: revision, state: u.state, sourceVersion: u.sourceVersion, staleAt: u.options.staleAt,
                    relevanceScore: u.options.relevanceScore, status: nil),
                operation: OperationStore.New(
                    id: opId, targetId: t.id, seq: t.opSeq + 1, kind: .update, revision: revision, state: u.state, alert: u.alert, options: opts,
                    consumesQuota: true, quotaDay: day, createdByKeyId: scope.keyId, idempotencyKey: u.idempotencyKey),
                victims: victims, keepsHead: WriteRules.keepsHead(queued: queued, victims: victims), recheckDay: recheck ? day : nil,
                exactNext: &exactQuota, targetChanged: false, writerSettingsSent: w.writerSettingsSent, idem: w.idem, now: w.now,
                replacingExpired: w.replacingExpired)
        }
    }

    /// Rule 8 state: the pinned schema of the target's template version, when it has one.
    static func checkState(_ c: PostgresConnection, tenant: String, target t: TargetRecord, state: JSONValue) throws {
        guard let tv = t.templateVersion,
            let schema = try SchemaCache.shared.schema(
                tenant: tenant, installation: t.installationId, templateVersion: tv,
                load: {
                    try TargetStore.templateSchema(c, tenantId: tenant, installationId: t.installationId, templateVersion: tv)
                })
        else { return }
        try schema.check(state)
    }

    // MARK: end

    /// Who may end: a sender key (its scope), or a master key (scope nil: a stateless end only), else 403.
    static func ender(_ p: Principal, for what: String) throws -> (tenant: String, scope: SenderScope?) {
        switch p {
        case .sender(let t, let s): return (t, s)
        case .master(let t, _): return (t, nil)
        default: throw Endpoint.forbidden("\(what) needs a sender key (or a master key for a stateless end), not a \(p.kindName)")
        }
    }

    /// Rule 2 of an end (docs/write-semantics.md): the body's shape (`WriteRequests.end`), no new
    /// state from a master key (`byMaster`), then `dismiss_at` and `expires_at` against `now`.
    /// - Throws: `400 INVALID_REQUEST` naming the field; `403 PERMISSION_DENIED` for a master
    ///   key's state.
    static func endRequest(_ body: JSONValue, now: Date, byMaster: Bool) throws -> EndRequest {
        let e = try WriteRequests.end(body)
        if byMaster && e.state != nil {
            throw Endpoint.forbidden("a master key may only end without new state (cleanup); use a sender key to send a final state")
        }
        try WriteRules.checkDismissAt(e.dismissAt, now: now)
        try WriteRules.checkExpiresAt(e.expiresAt, now: now)
        return e
    }

    static func end(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try ender(try ctx.auth.authenticate(req), for: "end")
        return try lockedWrite(
            ctx, req, tenant: tenant, scope: scope, action: .end, key: \.idempotencyKey,
            shape: { body, now in try endRequest(body, now: now, byMaster: scope == nil) }
        ) { c, w, now, day, exactQuota in
            let (r1, t, e) = (w.reads, w.target, w.request)
            let opId = w.operationId
            // What the end supersedes (every queued update and older end, with or without state).
            let queued = try WritePath.queued(result(r1, 1))
            let victims = WriteRules.supersededOperations(by: .end, hasState: e.state != nil, queued: queued)
            let keepsHead = WriteRules.keepsHead(queued: queued, victims: victims)
            guard let state = e.state else {
                // Rule 9: cleanup. Already over → 200 with a cancelled operation that sends nothing.
                if t.status.isTerminal {
                    let r2 = try c.pipeline([
                        WritePath.bumpSeq(tenantId: tenant, id: t.id, status: nil),
                        WritePath.insertOperation(
                            tenantId: tenant,
                            OperationStore.New(
                                id: opId, targetId: t.id, seq: t.opSeq + 1, kind: .end, status: .cancelled, pendingReason: "already_ended",
                                revision: t.revision, state: nil, alert: nil, options: WriteOptions(expiresAt: e.expiresAt), dismissAt: e.dismissAt,
                                consumesQuota: false, quotaDay: nil, createdByKeyId: scope?.keyId, idempotencyKey: e.idempotencyKey))
                        // Further statements of this write (e.g. event rows) join here.
                    ]).get()
                    return try finish(
                        c, tenant: tenant, w.idem, status: 200, writeBody(try WritePath.operation(r2[1]), t),
                        replacingExpired: w.replacingExpired)
                }
                return try queueEnd(
                    c, db: ctx.db, tenant: tenant, target: t, opId: opId, state: nil, e: e, scope: scope, victims: victims, keepsHead: keepsHead,
                    day: nil, recheck: false, exactNext: &exactQuota, writerSettingsSent: w.writerSettingsSent, idem: w.idem, now: w.now,
                    replacingExpired: w.replacingExpired)
            }
            try WriteRules.checkWritable(t.status, statelessEnd: false)
            try WriteRules.checkRevision(expected: e.expectedRevision!, current: t.revision)
            try checkState(c, tenant: tenant, target: t, state: state)
            try DeliveryPayload.check(
                platform: w.platform,
                DeliveryPayload.Content(
                    event: .end, targetId: t.id, revision: t.revision + 1, templateVersion: t.templateVersion ?? "", state: state, alert: nil,
                    staleAt: t.staleAt, relevanceScore: t.relevanceScore, dismissAt: e.dismissAt), now: now)
            let recheck = try checkQuota(
                c, tenant: tenant, day: day, read: w.quota.reading(r1), exact: exactQuota, now: now,
                reserves: WriteRules.reservation(of: day, insertedDay: day, superseded: victims))
            return try queueEnd(
                c, db: ctx.db, tenant: tenant, target: t, opId: opId, state: state, e: e, scope: scope, victims: victims, keepsHead: keepsHead,
                day: day, recheck: recheck, exactNext: &exactQuota, writerSettingsSent: w.writerSettingsSent, idem: w.idem, now: w.now,
                replacingExpired: w.replacingExpired)
        }
    }

    /// Round trips 2 and 3 of an end that queues: the target moves to `ending` (with the new
    /// final state and revision + 1 when `state` is given), the end operation is inserted, the
    /// queued operations it supersedes (`victims`, from `WriteRules.supersededOperations`) are
    /// marked, then the response is stored and the transaction commits.
    static func queueEnd(
        _ c: PostgresConnection, db: Database, tenant: String, target t: TargetRecord, opId: String, state: JSONValue?, e: EndRequest,
        scope: SenderScope?, victims: [QueuedOperation], keepsHead: Bool, day: String?, recheck: Bool, exactNext: inout Bool,
        writerSettingsSent: Bool, idem: Idempotency, now: Date, replacingExpired: Bool
    ) throws -> HTTPResponse {
        let revision = state == nil ? t.revision : t.revision + 1
        return try commitQueued(
            c, db: db, tenant: tenant, target: t,
            targetWrite: state.map {
                .state(revision: revision, state: $0, sourceVersion: nil, staleAt: nil, relevanceScore: nil, status: .ending)
            } ?? .seq(status: .ending),
            operation: OperationStore.New(
                id: opId, targetId: t.id, seq: t.opSeq + 1, kind: .end, revision: revision, state: state, alert: nil,
                options: WriteOptions(staleAt: t.staleAt, relevanceScore: t.relevanceScore, expiresAt: e.expiresAt), dismissAt: e.dismissAt,
                consumesQuota: state != nil, quotaDay: day, createdByKeyId: scope?.keyId, idempotencyKey: e.idempotencyKey),
            victims: victims, keepsHead: keepsHead, recheckDay: recheck ? day : nil, exactNext: &exactNext, targetChanged: true,
            writerSettingsSent: writerSettingsSent, idem: idem, now: now, replacingExpired: replacingExpired)
    }

    /// Round trips 2 and 3 of an update or an end that queues an operation on the locked target
    /// `t` (docs/write-path.md "Round trips"): `targetWrite` (the target's new state, revision
    /// and sequence, or only its sequence and status), the operation, the queued operations it
    /// supersedes (`victims`, locked in round trip 1, from `WriteRules.supersededOperations`),
    /// the net change of the quota counters (docs/write-path.md "Quota kept by the writer"), and
    /// the fast path's quota re-check when `recheckDay` is set and the write reserves a unit of
    /// that day; then the stored `202` response and `COMMIT`. The wake-ups name the operation,
    /// its victims and, when `targetChanged` (its status), the target. `keepsHead`: the write
    /// leaves the target's first queued operation in place (`WriteRules.keepsHead`), so its head
    /// stays as it is and is not refreshed. `writerSettingsSent`: the
    /// transaction's `BEGIN` already named the operation as head and quota writer
    /// (`LockedWrite.writerSettingsSent`), so only a claim's settings need a statement.
    /// `now`: the transaction's `now()` (`LockedWrite.now`). When nothing of round trip 2's
    /// results decides the answer (no claim at commit, no quota re-read), the response is built
    /// from `targetWrite` and `operation` before round trip 2, and its stored copy and `COMMIT`
    /// join that round trip: two round trips in all (docs/write-path.md "The response before
    /// round trip 2").
    /// - Throws: any pipeline error; SQLSTATE 40001 when the re-check sends the write to the
    ///   exact quota path (`recheckQuota`, sets `exactNext`).
    static func commitQueued(
        _ c: PostgresConnection, db: Database, tenant: String, target t: TargetRecord, targetWrite: TargetWrite,
        operation: OperationStore.New, victims: [QueuedOperation], keepsHead: Bool, recheckDay: String?, exactNext: inout Bool,
        targetChanged: Bool, writerSettingsSent: Bool, idem: Idempotency, now: Date, replacingExpired: Bool
    ) throws -> HTTPResponse {
        // A dispatcher in this process claims the operation in this transaction (docs/delivery.md
        // "Claims at commit"): its prelude goes before the insert, its claim after the supersede.
        // A write that keeps the head cannot have its operation claimed (it is not the head):
        // it borrows no slot.
        let claim = keepsHead ? nil : CommitClaim.begin(c, db: db)
        // The head and quota triggers leave this operation's insert and supersede to this write
        // (migrations 0040, 0041): it refreshes its target's head once after both, and adds the
        // net change of reserved units itself (none when it replaces a queued update of the same
        // day). The settings naming the writer usually rode on the BEGIN (`lockedWrite`); else
        // they go in one statement here, with the claim's prelude settings.
        let changes = WriteRules.reservationChanges(insertedDay: operation.consumesQuota ? operation.quotaDay : nil, superseded: victims)
        // The flag that lets the writes statement skip the triggers whose work it does itself
        // (migration 0046) goes in the statement just before it, and is cleared just after it
        // unless COMMIT follows (docs/write-path.md "The writer's statement skips the triggers").
        // A write that changes its target's status sets none.
        let writerRows = WritePath.writerRows(for: targetWrite, current: t.status)
        var writes = settingsStatements(
            writer: WritePath.writerSettings(operationId: operation.id), sent: writerSettingsSent,
            claim: claim?.settings(operationId: operation.id) ?? [], statement: writerRows)
        // A write that reserves no unit of the day cannot take the day past its limit: no re-check.
        let recheckDay = recheckDay.flatMap { d in changes.contains { $0.day == d && $0.change > 0 } ? d : nil }
        // Nothing after the writes depends on their results without a claim or a re-check: the
        // answer is built from the rows as the statements will leave them, and stored with them.
        let answerNow = claim == nil && recheckDay == nil
        let shownAt = Date()
        let built =
            answerNow
            ? writeBody(operation.record(tenantId: tenant, now: now), t.applying(targetWrite, now: now), shownAt: shownAt).serialized() : nil
        // The target's change, the operation, the supersede, the quota counters' net change and
        // the stored answer: one statement (docs/write-path.md "One statement for the writes").
        // The stored answer joins it only when it is the one part that can wait for another
        // transaction (for a concurrent holder of the key: `storeFailure` reads a lock timeout
        // there as `409 IDEMPOTENCY_KEY_IN_USE`): not beside a quota counter's change (its shard
        // row may be another session's too), and not after a record past its retention.
        let storeInWrites = built != nil && !replacingExpired && changes.isEmpty
        var more = changes.map { WritePath.adjustReserved(tenantId: tenant, day: $0.day, by: $0.change) }
        if storeInWrites, let built { more += idem.store(tenant, status: 202, body: built, replacingExpired: false) }
        let writeIndex = writes.count
        // With a claim at commit the claim settles the head: its trigger deletes the row when it
        // takes the operation, and `CommitClaim.read` refreshes the head when it does not.
        // A write that keeps the first queued operation cannot change the head (`keepsHead`).
        // Otherwise the head is refreshed in the same statement (docs/write-path.md "The head in
        // the same statement").
        // A write answered before its statements ran reads nothing back, except where the built
        // answer is checked against the rows (debug builds: docs/write-path.md "Rows nobody reads").
        let rowsBack = built == nil || WritePath.checksBuiltAnswers
        writes.append(
            WritePath.writes(
                tenantId: tenant, target: t, targetWrite, operation: operation, victims: victims.map(\.id), more: more,
                refreshingHead: claim == nil && !keepsHead, returningRows: rowsBack))
        // What follows the writes statement in this round trip: the claim, the quota re-read,
        // and the stored answer when it is not in the writes statement. Further statements of
        // this write (e.g. event rows) join `after`.
        var after: [PostgresStatement] = []
        if let claim { after.append(claim.claim(tenantId: tenant, operationId: operation.id)) }
        let recheckAt = after.count
        if let recheckDay { after.append(WritePath.readQuota(tenantId: tenant, day: recheckDay)) }
        if let built, !storeInWrites { after += idem.store(tenant, status: 202, body: built, replacingExpired: replacingExpired) }
        // The flag lives for the writes statement only: it is cleared at once unless COMMIT
        // follows that statement in this pipeline (nothing after it, and the answer built).
        if writerRows != nil && !(after.isEmpty && built != nil) { writes.append(WritePath.endOfWriterRows) }
        let claimIndex = writes.count
        let quotaIndex = writes.count + recheckAt
        writes += after
        if let built {
            try WritePath.notify(
                c, tenantId: tenant, queued: true, superseded: victims.map(\.id), targetChanged: targetChanged ? t.id : nil,
                operationId: operation.id)
            let outcome = try c.pipeline(writes, commit: true)
            try IdempotencyStore.storeFailure(outcome, at: storeInWrites ? writeIndex : writes.count - 1)
            let r2 = try outcome.get()
            if rowsBack {
                // The built answer must be what the statements returned; checked in every test
                // run (`WritePath.checksBuiltAnswers`).
                let (op, target) = try WritePath.written(r2[writeIndex], to: t)
                let returned = writeBody(op, target, shownAt: shownAt).serialized()
                precondition(
                    returned == built,
                    "write response built before round trip 2 differs from the rows: \(String(decoding: built, as: UTF8.self)) vs \(String(decoding: returned, as: UTF8.self))"
                )
            }
            return HTTPResponse(status: 202, headers: [("Content-Type", "application/json")], body: built)
        }
        let r2 = try c.pipeline(writes).get()
        let (op, target) = try WritePath.written(r2[writeIndex], to: t)
        if let recheckDay { try recheckQuota(r2[quotaIndex], tenant: tenant, day: recheckDay, exactNext: &exactNext) }
        let beforeCommit = try claim?.read(r2[claimIndex], tenantId: tenant, targetId: t.id) ?? []
        try WritePath.notify(
            c, tenantId: tenant, queued: claim?.claimedAny != true, superseded: victims.map(\.id), targetChanged: targetChanged ? t.id : nil,
            operationId: operation.id)
        return try finish(c, tenant: tenant, idem, status: 202, writeBody(op, target), before: beforeCommit, replacingExpired: replacingExpired)
    }

    /// `{operation, target}` of a write (docs/write-semantics.md); `shownAt` is the time the
    /// target's priority-10 window is counted at.
    static func writeBody(_ op: OperationRecord, _ t: TargetRecord, shownAt: Date = Date()) -> JSONValue {
        .object(["operation": Encode.operation(op), "target": Encode.target(t, now: shownAt)])
    }

    /// `?wait_ms`: waits for the operation to leave `queued`/`sending`, then answers with
    /// its current state (same status code). The wait holds no worker thread; when the
    /// credential of `req` already has its cap of long-polls waiting, the write's own
    /// response is answered at once, without waiting (docs/http-limits.md, "Long-polls").
    static func waitIfAsked(_ ctx: APIContext, tenant: String, response: HTTPResponse, waitMs: Int, req: HTTPRequest? = nil) throws -> HTTPResponse {
        guard waitMs > 0, let v = try? JSONValue.parse(response.body), let opId = v["operation"]?["id"]?.stringValue,
            let targetId = v["target"]?["id"]?.stringValue
        else { return response }
        let request = req ?? HTTPRequest(method: "POST", path: "/")
        let latest = Locked<OperationRecord?>(nil)
        return LongPoll.respond(
            ctx, request, key: opId, timeoutSeconds: Double(waitMs) / 1000,
            check: {
                let op = try ctx.db.tenant(tenant) { c in try OperationStore.get(c, tenantId: tenant, id: opId) }
                latest.withLock { $0 = op }
                return op?.status.isFinal ?? true
            },
            render: { result in
                _ = try result.get()
                guard let op = latest.withLock({ $0 }),
                    let t = try ctx.db.tenant(tenant, { c in try TargetStore.get(c, tenantId: tenant, id: targetId) })
                else { return response }
                var r = HTTPResponse.json(response.status, writeBody(op, t))
                r.headers += response.headers.filter { $0.0.lowercased() == "idempotent-replayed" }
                return r
            }, refused: { response })
    }
}
