import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres

/// docs/channels.md: channel resources and writes. A master key creates and reads channels; a
/// sender key reads and writes the channels its `targets` name. A channel write commits one
/// channel operation and never touches member rows: the broadcaster and the fan-out expander
/// (in the dispatcher process) deliver it.
enum ChannelHandlers {
    // MARK: access

    /// Rule 1 for a channel: absent or another tenant's → 404; a sender key must name it in
    /// `targets` (else 403) and hold `permission` when one is needed (reads need any permission).
    static func check(_ ch: ChannelRecord?, scope: SenderScope?, id: String, permission: Permission?) throws -> ChannelRecord {
        guard let ch else { throw Endpoint.notFound("channel") }
        guard let scope else { return ch }
        guard scope.targets.contains(ch.id) else { throw Endpoint.forbidden("this sender key does not name channel \(id) in its targets") }
        if let permission, !scope.permissions.contains(permission) {
            throw Endpoint.forbidden("this sender key lacks the \(permission.rawValue) permission")
        }
        if permission == nil && scope.permissions.isEmpty { throw Endpoint.forbidden("this sender key has no permissions") }
        return ch
    }

    /// The channel a reader may see (master key or covering sender key).
    static func visible(_ ctx: APIContext, _ req: HTTPRequest, permission: Permission? = nil) throws -> (String, SenderScope?, ChannelRecord) {
        let (tenant, scope) = try TargetReadHandlers.reader(ctx, req)
        let id = req.pathParameters["ch"] ?? ""
        let found =
            Identifier.isValid(id, kind: .channel) ? try ctx.db.tenant(tenant) { c in try ChannelStore.get(c, tenantId: tenant, id: id) } : nil
        return (tenant, scope, try check(found, scope: scope, id: id, permission: permission))
    }

    // MARK: create, list, read

    /// `POST /v1/remote-updates/channels` (master key): creates the APNs channel first, then
    /// stores the channel with its `apns_channel_id`. APNs refusal or no answer → `502
    /// PROVIDER_ERROR` (nothing stored); no APNs credential of the tenant lists `app_id` for
    /// `environment` → `400 INVALID_REQUEST` naming `app_id` (nothing sent, nothing stored); more than `ChannelRules.maxActiveChannelsPerApp` active channels in the
    /// (app, environment) → `409 CHANNEL_LIMIT`.
    static func create(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, keyId) = try Endpoint.requireMaster(try ctx.auth.authenticate(req))
        let body = try req.jsonBody()
        let r = try ChannelRequests.create(body)
        return try Endpoint.idempotent(ctx, req, tenantId: tenant, key: r.idempotencyKey, body: body, seal: false) { c in
            let cap = ChannelRules.maxActiveChannelsPerApp
            let active = try ChannelStore.lockAndCountActive(c, tenantId: tenant, appId: r.appId, environment: r.environment, cap: cap)
            if active >= cap {
                throw DomainError(
                    status: 409, code: "CHANNEL_LIMIT",
                    message: "\(r.appId) already has \(cap) active channels in \(r.environment); end one first",
                    details: ["limit": .int(Int64(cap)), "actual": .int(Int64(active)), "field": "app_id"])
            }
            let apnsId: String
            switch ctx.channels.createChannel(tenantId: tenant, appId: r.appId, environment: r.environment, storagePolicy: r.apnsStoragePolicy) {
            case .ok(let id?):
                apnsId = id
                // A transaction that does not commit after this (a later error, or the pool running
                // the body again on a new connection) would leave APNs holding a channel that no
                // LiveRelay channel names, one more per attempt: it is deleted instead
                // (docs/channels.md "Resources"), off the request's transaction and 2 s later,
                // and only when no channel names it (a COMMIT whose outcome was unknown may
                // have stored it after all). When that check cannot run, it is left alone.
                let (db, channels, log, appId, environment) = (ctx.db, ctx.channels, ctx.log, r.appId, r.environment)
                c.addTransactionHook(
                    TransactionHook(
                        committed: { _ in },
                        rolledBack: {
                            DispatchQueue.global().asyncAfter(deadline: .now() + 2) {
                                Self.deleteUnstoredAPNsChannel(
                                    db: db, channels: channels, log: log, tenantId: tenant, appId: appId, environment: environment,
                                    apnsChannelId: id)
                            }
                        }))
            case .ok(nil):
                throw providerError("APNs created the channel but sent no apns-channel-id", status: 201, reason: nil)
            case .refused(let status, let reason):
                throw providerError("APNs refused to create the channel (\(status) \(reason))", status: status, reason: reason)
            case .unavailable(let message):
                throw providerError("APNs channel management is unavailable: \(message)", status: nil, reason: nil)
            case .noCredentials(let message):
                // The tenant's own set-up, not a provider failure: a 4xx naming the field to fix.
                throw DomainError.invalid(
                    "app_id",
                    "cannot create an APNs channel for \(r.appId) in \(r.environment): \(message); "
                        + "PUT /v1/provider-credentials/apns with this app in `topics` first")
            }
            let ch = try ChannelStore.insert(c, tenantId: tenant, id: Identifier.make(.channel), r, apnsChannelId: apnsId, createdByKeyId: keyId)
            return (201, Encode.channel(ch))
        }
    }

    /// Deletes APNs channel `apnsChannelId` (made by a creation whose transaction did not
    /// commit) unless a channel of `tenantId` names it; logs a deletion APNs refused and a check
    /// that could not run (then the APNs channel is kept).
    static func deleteUnstoredAPNsChannel(
        db: Database, channels: any ChannelManaging, log: Logger, tenantId: String, appId: String, environment: String,
        apnsChannelId: String
    ) {
        let fields: [String: JSONValue] = ["app_id": .string(appId), "environment": .string(environment)]
        do {
            let stored = try db.tenant(tenantId) { c in try ChannelStore.namesAPNsChannel(c, tenantId: tenantId, apnsChannelId: apnsChannelId) }
            if stored { return }
        } catch {
            log.warning("kept the APNs channel of a channel creation that may not have committed: could not check", fields)
            return
        }
        let outcome = channels.deleteChannel(tenantId: tenantId, appId: appId, environment: environment, apnsChannelId: apnsChannelId)
        if case .ok = outcome { return }
        log.warning(
            "could not delete the APNs channel of a channel creation that did not commit",
            fields.merging(["outcome": .string("\(outcome)")]) { a, _ in a })
    }

    /// `502 PROVIDER_ERROR` with `details.provider_status` / `provider_reason`.
    static func providerError(_ message: String, status: Int?, reason: String?) -> DomainError {
        DomainError(
            status: 502, code: "PROVIDER_ERROR", message: message,
            details: ["provider_status": status.map { .int(Int64($0)) } ?? .null, "provider_reason": J.str(reason)])
    }

    /// `GET /v1/remote-updates/channels`: a sender key sees the channels its `targets` name.
    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try TargetReadHandlers.reader(ctx, req)
        if let scope, scope.permissions.isEmpty { throw Endpoint.forbidden("this sender key has no permissions") }
        let (limit, after) = try Endpoint.listParameters(req)
        let only = scope.map { Array($0.targets.filter { Identifier.isValid($0, kind: .channel) }) }
        let page = try ctx.db.tenant(tenant) { c in try ChannelStore.list(c, tenantId: tenant, only: only, limit: limit, after: after) }
        return Endpoint.list(page, Encode.channel)
    }

    static func get(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (_, _, ch) = try visible(ctx, req)
        return .json(200, Encode.channel(ch))
    }

    /// `GET …/snapshot`: business state; needs a sender key with `activities:read-state`.
    static func snapshot(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (_, scope) = try TargetReadHandlers.reader(ctx, req)
        guard scope != nil else { throw Endpoint.forbidden("a snapshot holds business state: it needs a sender key with activities:read-state") }
        let (_, _, ch) = try visible(ctx, req, permission: .readState)
        return .json(
            200,
            .object([
                "channel_id": .string(ch.id), "revision": .int(ch.revision), "state": ch.state ?? .null,
                "updated_at": J.ts(ch.updatedAt)
            ]))
    }

    static func operations(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _, ch) = try visible(ctx, req)
        let (limit, before) = try Endpoint.listParameters(req)
        let (page, counts) = try ctx.db.tenant(tenant) { c in
            let p = try ChannelStore.listOperations(c, tenantId: tenant, channelId: ch.id, limit: limit, before: before)
            return (p, try ChannelStore.fanoutCounts(c, tenantId: tenant, ids: p.items.map(\.id)))
        }
        return Endpoint.list(page) { Encode.channelOperation($0, counts[$0.id] ?? FanoutCounts()) }
    }

    static func operation(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try TargetReadHandlers.reader(ctx, req)
        let id = req.pathParameters["cop"] ?? ""
        guard Identifier.isValid(id, kind: .channelOperation),
            let (op, ch, counts) = try ctx.db.tenant(
                tenant,
                { c -> (ChannelOperationRecord, ChannelRecord?, FanoutCounts)? in
                    guard let op = try ChannelStore.getOperation(c, tenantId: tenant, id: id) else { return nil }
                    return (
                        op, try ChannelStore.get(c, tenantId: tenant, id: op.channelId),
                        try ChannelStore.fanoutCounts(c, tenantId: tenant, ids: [id])[id] ?? FanoutCounts()
                    )
                })
        else { throw Endpoint.notFound("channel operation") }
        _ = try check(ch, scope: scope, id: op.channelId, permission: nil)
        return .json(200, Encode.channelOperation(op, counts))
    }

    /// `GET …/members`: the member targets (listTargets' objects and filters), each with
    /// `delivery`; a sender key sees only the members it covers, as in listTargets
    /// (docs/channels.md "Resources").
    static func members(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope, ch) = try visible(ctx, req)
        let (limit, after) = try Endpoint.listParameters(req)
        if let s = req.query["status"], TargetStatus(rawValue: s) == nil {
            throw DomainError.invalid("status", "status must be one of \(TargetStatus.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let filter = TargetFilter(
            status: req.query["status"], businessKey: req.query["business_key"], installationId: req.query["installation_id"],
            startTargetId: req.query["start_target_id"], channelId: ch.id, coverage: scope)
        let page = try ctx.db.tenant(tenant) { c in try TargetStore.list(c, tenantId: tenant, filter: filter, limit: limit, after: after) }
        return Endpoint.list(page) { Encode.target($0, now: ctx.now()) }
    }

    // MARK: writes

    /// The channel write's quota rule (docs/channels.md "Quota"): `1 + fanout members` units
    /// must remain today, else `429 QUOTA_EXCEEDED`; the write then reserves its broadcast's
    /// unit as it commits (`ChannelStore.insertOperation`), and each fan-out send reserves its
    /// own when the expander queues it. Far from the limit the committed counters decide; near
    /// it every shard is locked and read exactly (`QuotaStore.lockAll`).
    static func checkQuota(_ c: PostgresConnection, tenant: String, needed: Int64, now: Date) throws {
        let day = QuotaStore.day(now)
        var q = try QuotaStore.decode(try c.query(QuotaStore.readSQL, [tenant, day])[0])
        if q.reserved + q.used + needed + Int64(QuotaStore.shards) > q.limit { q = try QuotaStore.lockAll(c, tenantId: tenant, day: day) }
        if q.reserved + q.used + needed > q.limit {
            throw DomainError(
                status: 429, code: "QUOTA_EXCEEDED",
                message: "this channel write needs \(needed) push units (1 + fan-out members); \(max(0, q.limit - q.reserved - q.used)) remain today",
                details: [
                    "resets_at": .string(Timestamp.format(WriteRules.quotaResetsAt(now))), "limit": .int(q.limit),
                    "needed": .int(needed)
                ])
        }
    }

    /// The rules shared by update and end after rule 3 (docs/channels.md): the channel must be
    /// `active` (`409 CHANNEL_ENDED`), then `expected_revision`, schema and payload size.
    static func checkWritable(_ ch: ChannelRecord) throws {
        if ch.refusesWrites {
            throw DomainError(
                status: 409, code: "CHANNEL_ENDED", message: "channel \(ch.id) is \(ch.status); it takes no more writes",
                details: ["channel_id": .string(ch.id), "status": .string(ch.status)])
        }
    }

    static func checkState(_ ch: ChannelRecord, _ state: JSONValue) throws {
        if let schema = ch.schema { try StateSchema.compile(schema).check(state) }
    }

    /// Commits one channel write: locks the channel's queued broadcasts, checks a state-bearing
    /// write's quota (`checkQuota`: `429 QUOTA_EXCEEDED`, everything rolled back), supersedes the
    /// queued broadcasts it replaces, inserts the channel operation (which reserves its
    /// broadcast's unit) and moves the channel on. Never reads or writes a member row.
    static func commit(
        _ c: PostgresConnection, tenant: String, ch: ChannelRecord, kind: PushEvent, state: JSONValue?, alert: PushAlert?,
        options: WriteOptions, dismissAt: Date?, quotaDay: String?, keyId: String?, idempotencyKey: String, now: Date
    ) throws -> JSONValue {
        let opId = Identifier.make(.channelOperation)
        // Lock order (migration 0037): the channel (the caller), its queued channel operations,
        // then the quota counters (the check near the limit, the reservation of the insert). The
        // broadcaster and the expander hold one channel operation before they touch a counter.
        let queued = try ChannelStore.queuedBroadcasts(c, tenantId: tenant, channelId: ch.id)
        if state != nil { try checkQuota(c, tenant: tenant, needed: 1 + ch.membersFanout, now: now) }
        let victims = kind == .end ? queued.map(\.id) : (state != nil ? ChannelRules.supersededBroadcasts(by: kind, queued: queued) : [])
        try ChannelStore.supersedeBroadcasts(c, tenantId: tenant, ids: victims, by: opId)
        let revision = state == nil ? ch.revision : ch.revision + 1
        var opts = options
        opts.staleAt = options.staleAt ?? ch.staleAt
        opts.relevanceScore = options.relevanceScore ?? ch.relevanceScore
        let op = try ChannelStore.insertOperation(
            c, tenantId: tenant,
            ChannelStore.NewOperation(
                id: opId, channelId: ch.id, seq: ch.opSeq + 1, kind: kind, revision: revision, state: state ?? ch.state, alert: alert,
                options: opts, dismissAt: dismissAt, consumesQuota: state != nil, quotaDay: state != nil ? quotaDay : nil, createdByKeyId: keyId,
                idempotencyKey: idempotencyKey))
        let updated = try ChannelStore.applyWrite(
            c, tenantId: tenant, id: ch.id, revision: revision, state: state,
            staleAt: options.staleAt, relevanceScore: options.relevanceScore,
            status: kind == .end ? "ending" : nil)
        return .object(["channel_operation": Encode.channelOperation(op, FanoutCounts()), "channel": Encode.channel(updated)])
    }

    /// The skeleton of a channel write (docs/write-semantics.md rule order) for `tenant` and
    /// `scope`, already authenticated: reads the body and decides its shape (rule 2,
    /// `shape(body, now)`; its error is raised only after rule 1), then inside one transaction
    /// the channel is locked and rule 1 decided (404/403), then rule 2, idempotency (rule 3,
    /// `Endpoint.idempotent`), then `work(connection, locked channel, request, now)`.
    /// - Throws: `400 INVALID_REQUEST` for a body that is not JSON; whatever the rules and
    ///   `work` throw.
    static func write<Body>(
        _ ctx: APIContext, _ req: HTTPRequest, tenant: String, scope: SenderScope?, permission: Permission,
        key: (Body) -> String, shape: (JSONValue, Date) throws -> Body,
        work: @escaping (PostgresConnection, ChannelRecord, Body, _ now: Date) throws -> JSONValue
    ) throws -> HTTPResponse {
        let body = try req.jsonBody()
        let now = ctx.now()
        let request = Result { try shape(body, now) }
        let id = req.pathParameters["ch"] ?? ""
        var locked: ChannelRecord?
        return try Endpoint.idempotent(
            ctx, req, tenantId: tenant, key: (try? request.get()).map(key) ?? "", body: body, seal: false,
            retentionSeconds: LifecycleHandlers.writeKeyRetentionSeconds,
            before: { c in
                let found = Identifier.isValid(id, kind: .channel) ? try ChannelStore.get(c, tenantId: tenant, id: id, lock: "update") : nil
                locked = try check(found, scope: scope, id: id, permission: permission)
                _ = try request.get()
            }
        ) { c in
            let ch = locked!
            try checkWritable(ch)
            return (202, try work(c, ch, try request.get(), now))
        }
    }

    /// Rule 2 of a channel update (docs/channels.md): the body's shape (`ChannelRequests.update`),
    /// then `expires_at` after `now`.
    /// - Throws: `400 INVALID_REQUEST` naming the field.
    static func updateRequest(_ body: JSONValue, now: Date) throws -> ChannelUpdateRequest {
        let u = try ChannelRequests.update(body)
        try WriteRules.checkExpiresAt(u.options.expiresAt, now: now)
        return u
    }

    /// `POST …/channels/{ch}/update` (sender key with `activities:update` naming the channel).
    static func update(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try LifecycleHandlers.senderScope(try ctx.auth.authenticate(req), for: "a channel update")
        return try write(ctx, req, tenant: tenant, scope: scope, permission: .update, key: \.idempotencyKey, shape: updateRequest) { c, ch, u, now in
            try WriteRules.checkRevision(expected: u.expectedRevision, current: ch.revision)
            try checkState(ch, u.state)
            try ChannelRequests.checkPayload(
                channelId: ch.id, event: .update, state: u.state, alert: u.alert,
                staleAt: u.options.staleAt ?? ch.staleAt, relevanceScore: u.options.relevanceScore ?? ch.relevanceScore,
                dismissAt: nil, now: now)
            return try commit(
                c, tenant: tenant, ch: ch, kind: .update, state: u.state, alert: u.alert, options: u.options, dismissAt: nil,
                quotaDay: QuotaStore.day(now), keyId: scope.keyId, idempotencyKey: u.idempotencyKey, now: now)
        }
    }

    /// Rule 2 of a channel end (docs/channels.md): the body's shape (`ChannelRequests.end`), no
    /// new state from a master key (`byMaster`), then `dismiss_at` against `now`.
    /// - Throws: `400 INVALID_REQUEST` naming the field; `403 PERMISSION_DENIED` for a master
    ///   key's state.
    static func endRequest(_ body: JSONValue, now: Date, byMaster: Bool) throws -> ChannelEndRequest {
        let e = try ChannelRequests.end(body)
        if byMaster && e.state != nil {
            throw Endpoint.forbidden("a master key may end a channel only without new state; use a sender key to send a final state")
        }
        try WriteRules.checkDismissAt(e.dismissAt, now: now)
        return e
    }

    /// `POST …/channels/{ch}/end`: ends every member, then the APNs channel is deleted. A
    /// stateless end is free and a master key may send it.
    static func end(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, scope) = try LifecycleHandlers.ender(try ctx.auth.authenticate(req), for: "a channel end")
        return try write(
            ctx, req, tenant: tenant, scope: scope, permission: .end, key: \.idempotencyKey,
            shape: { body, now in try endRequest(body, now: now, byMaster: scope == nil) }
        ) { c, ch, e, now in
            if let rev = e.expectedRevision { try WriteRules.checkRevision(expected: rev, current: ch.revision) }
            if let state = e.state {
                try checkState(ch, state)
                try ChannelRequests.checkPayload(
                    channelId: ch.id, event: .end, state: state, alert: nil, staleAt: ch.staleAt,
                    relevanceScore: ch.relevanceScore, dismissAt: e.dismissAt, now: now)
            }
            return try commit(
                c, tenant: tenant, ch: ch, kind: .end, state: e.state, alert: nil, options: WriteOptions(),
                dismissAt: e.dismissAt, quotaDay: QuotaStore.day(now), keyId: scope?.keyId, idempotencyKey: e.idempotencyKey, now: now)
        }
    }
}

extension Encode {
    /// The channel object (docs/channels.md): no business state (`state_present` only).
    static func channel(_ ch: ChannelRecord) -> JSONValue {
        .object([
            "id": .string(ch.id), "object": "channel", "app_id": .string(ch.appId), "environment": .string(ch.environment),
            "activity_type": .string(ch.activityType), "attributes_type": .string(ch.attributesType),
            "storage_policy": .string(ch.storagePolicy), "label": .string(ch.label), "apns_channel_id": .string(ch.apnsChannelId),
            "status": .string(ch.status), "end_reason": J.str(ch.endReason), "revision": .int(ch.revision),
            "state_present": .bool(ch.state != nil),
            "members": .object(["broadcast": .int(ch.membersBroadcast), "fanout": .int(ch.membersFanout), "ended": .int(ch.membersEnded)]),
            "created_at": J.ts(ch.createdAt), "updated_at": J.ts(ch.updatedAt), "ended_at": J.ts(ch.endedAt)
        ])
    }

    /// The channel operation object (docs/channels.md); `fanout` sums its per-target operations.
    static func channelOperation(_ op: ChannelOperationRecord, _ f: FanoutCounts) -> JSONValue {
        let broadcast: JSONValue =
            op.broadcastStatus.map { s in
                .object([
                    "status": .string(s.rawValue), "apns_request_id": J.str(op.apnsRequestId), "apns_unique_id": J.str(op.apnsUniqueId),
                    "failure": op.broadcastFailure ?? .null
                ])
            } ?? .null
        let status = ChannelRules.operationStatus(
            broadcast: op.broadcastStatus, fanoutDone: op.fanoutDone,
            fanoutStarted: op.fanoutCursor != nil || f.members > 0, superseded: op.supersededBy != nil)
        return .object([
            "id": .string(op.id), "object": "channel_operation", "channel_id": .string(op.channelId), "kind": .string(op.kind.rawValue),
            "status": .string(status), "revision": .int(op.revision), "has_alert": .bool(op.alert != nil),
            "priority": .int(Int64(op.priority)), "superseded_by": J.str(op.supersededBy), "broadcast": broadcast,
            "fanout": .object([
                "members": .int(f.members), "queued": .int(f.count("queued")), "sent": .int(f.count("sending")),
                "accepted": .int(f.count("accepted")), "failed": .int(f.count("failed") + f.count("unknown") + f.count("expired")),
                "superseded": .int(f.count("superseded") + f.count("cancelled")), "done": .bool(op.fanoutDone)
            ]),
            "created_at": J.ts(op.createdAt), "updated_at": J.ts(op.updatedAt)
        ])
    }
}
