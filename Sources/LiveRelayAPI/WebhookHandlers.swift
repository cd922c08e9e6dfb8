import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// Webhook endpoints and the events API, master key only (docs/webhooks.md).
enum WebhookHandlers {
    /// `POST /v1/webhook-endpoints` `{url, events, description?, idempotency_key}` → 201 the
    /// endpoint with its `secret` (shown here only; a replay returns the same secret, stored
    /// sealed for 24 h like sender-key creation).
    static func create(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, json) = try Endpoint.reader(req)
        let url = try r.string("url", maxLength: WebhookRules.maxURLLength)
        let events = try WebhookRules.parseEvents(try r.optionalStringArray("events", maxCount: WebhookRules.maxEvents, maxLength: 64))
        let description = try r.optionalString("description", maxLength: WebhookRules.maxDescriptionLength) ?? ""
        let key = try r.idempotencyKey()
        try r.finish()
        try WebhookAddressCheck.check(url, allowPrivate: ctx.webhookAllowPrivate, tenant: tenant)
        return try Endpoint.idempotent(ctx, req, tenantId: tenant, key: key, body: json, seal: true) { c in
            let e = try WebhookStore.insertEndpoint(
                c, tenantId: tenant, id: Identifier.make(.webhookEndpoint), url: url,
                events: events, description: description)
            let secret = WebhookStore.newSecret()
            try WebhookStore.addSecret(c, tenantId: tenant, endpointId: e.id, secret: secret, kek: ctx.kek)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "webhook_endpoint.create", objectType: "webhook_endpoint",
                objectId: e.id, requestId: req.requestId, details: ["events": J.strs(events)])
            return (201, Encode.webhookEndpoint(e, secret: secret))
        }
    }

    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let page = try Endpoint.masterPage(ctx, req) { c, tenant, limit, after in
            try WebhookStore.listEndpoints(c, tenantId: tenant, limit: limit, after: after)
        }
        return Endpoint.list(page) { Encode.webhookEndpoint($0) }
    }

    static func endpointOrNotFound(_ c: PostgresConnection, _ tenant: String, _ req: HTTPRequest) throws -> WebhookEndpointRecord {
        guard let e = try WebhookStore.endpoint(c, tenantId: tenant, id: req.pathParameters["we"] ?? "") else {
            throw Endpoint.notFound("webhook endpoint")
        }
        return e
    }

    static func get(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let e = try ctx.db.tenant(tenant) { c in try endpointOrNotFound(c, tenant, req) }
        return .json(200, Encode.webhookEndpoint(e))
    }

    /// `PATCH …/{we}` `{url?, events?, description?, status?: enabled|disabled, idempotency_key?}` → 200.
    static func update(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, _) = try Endpoint.reader(req)
        let url = try r.optionalString("url", minLength: 1, maxLength: WebhookRules.maxURLLength)
        let rawEvents = try r.optionalStringArray("events", maxCount: WebhookRules.maxEvents, maxLength: 64)
        let events = try rawEvents.map { try WebhookRules.parseEvents($0) }
        let description = try r.optionalString("description", maxLength: WebhookRules.maxDescriptionLength)
        let status = try r.optionalEnum("status", ["enabled", "disabled"])
        _ = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        if let url { try WebhookAddressCheck.check(url, allowPrivate: ctx.webhookAllowPrivate, tenant: tenant) }
        let e = try ctx.db.tenant(tenant) { c -> WebhookEndpointRecord in
            guard
                let e = try WebhookStore.updateEndpoint(
                    c, tenantId: tenant, id: req.pathParameters["we"] ?? "", url: url,
                    events: events, description: description, status: status)
            else {
                throw Endpoint.notFound("webhook endpoint")
            }
            var details: [String: JSONValue] = [:]
            if let status { details["status"] = .string(status) }
            if let events { details["events"] = J.strs(events) }
            if url != nil { details["url_changed"] = true }
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "webhook_endpoint.update", objectType: "webhook_endpoint",
                objectId: e.id, requestId: req.requestId, details: details)
            return e
        }
        return .json(200, Encode.webhookEndpoint(e))
    }

    /// `DELETE …/{we}` → 200 `{id, object, deleted: true}`; its queued deliveries go with it.
    static func delete(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let id = req.pathParameters["we"] ?? ""
        try ctx.db.tenant(tenant) { c in
            guard try WebhookStore.deleteEndpoint(c, tenantId: tenant, id: id) else { throw Endpoint.notFound("webhook endpoint") }
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "webhook_endpoint.delete", objectType: "webhook_endpoint",
                objectId: id, requestId: req.requestId)
        }
        return .json(200, ["id": .string(id), "object": "webhook_endpoint", "deleted": true])
    }

    /// `POST …/{we}/rotate-secret` `{expires_in_seconds?: 0…604800 (default 0), idempotency_key?}`
    /// → 200 the endpoint with its new `secret`. The secrets signing until now keep signing for
    /// `expires_in_seconds` more (each delivery then carries one `v1=` per active secret). With an
    /// `idempotency_key`, a replay returns the same new secret (stored sealed for 24 h).
    static func rotate(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, json) = try Endpoint.reader(req, allowEmpty: true)
        let overlap = try r.optionalInt("expires_in_seconds", 0...WebhookRules.maxRotationOverlapSeconds) ?? 0
        let key = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        let work: (PostgresConnection) throws -> (Int, JSONValue) = { c in
            let e = try endpointOrNotFound(c, tenant, req)
            let now = ctx.now()
            try WebhookStore.expireSecrets(c, tenantId: tenant, endpointId: e.id, now: now, expiresAt: now.addingTimeInterval(Double(overlap)))
            let secret = WebhookStore.newSecret()
            try WebhookStore.addSecret(c, tenantId: tenant, endpointId: e.id, secret: secret, kek: ctx.kek)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "webhook_endpoint.rotate_secret", objectType: "webhook_endpoint",
                objectId: e.id, requestId: req.requestId, details: ["expires_in_seconds": .int(overlap)])
            return (200, Encode.webhookEndpoint(e, secret: secret))
        }
        return try Endpoint.idempotentIfKeyed(ctx, req, tenantId: tenant, key: key, body: json, seal: true, work: work)
    }

    /// `POST …/{we}/test` → 202 the `webhook.test` event, queued for this endpoint alone (also
    /// when it is disabled, so a fixed receiver can be checked before re-enabling it).
    static func test(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, _) = try Endpoint.reader(req, allowEmpty: true)
        _ = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        let ev = try ctx.db.tenant(tenant) { c -> EventRecord in
            let e = try endpointOrNotFound(c, tenant, req)
            guard let ev = try EventStore.record(c, tenantId: tenant, type: .webhookTest, object: Encode.webhookEndpoint(e)) else {
                throw PostgresError.retryable("webhook.test event not inserted")
            }
            try WebhookStore.queueDelivery(c, tenantId: tenant, endpointId: e.id, event: ev)
            return ev
        }
        return .json(202, ev.json)
    }

    /// `GET …/{we}/deliveries`: attempts, newest first.
    static func deliveries(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let (limit, after) = try Endpoint.listParameters(req)
        var before: Int64?
        if let after {
            guard let v = Int64(after) else { throw DomainError.invalid("cursor", "cursor is not one this API returned") }
            before = v
        }
        let page = try ctx.db.tenant(tenant) { c -> Page<WebhookAttemptRecord> in
            let e = try endpointOrNotFound(c, tenant, req)
            return try WebhookStore.attempts(c, tenantId: tenant, endpointId: e.id, limit: limit, before: before)
        }
        return Endpoint.list(page) { a in Encode.webhookAttempt(a, endpointId: req.pathParameters["we"] ?? "") }
    }

    /// `GET /v1/events?type=&target_id=&channel_id=`: the last 30 days, newest first.
    static func listEvents(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let (limit, before) = try Endpoint.listParameters(req)
        var f = EventFilter()
        if let t = req.query["type"] {
            guard EventType(rawValue: t) != nil else {
                throw DomainError.invalid("type", "type must be one of \(EventType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            f.type = t
        }
        if let t = req.query["target_id"] {
            guard Identifier.isValid(t, kind: .target) else { throw DomainError.invalid("target_id", "target_id must be a target id (tgt_…)") }
            f.targetId = t
        }
        if let ch = req.query["channel_id"] {
            guard ch.hasPrefix("ch_"), Identifier.isValidBody(Substring(ch.dropFirst(3))) else {
                throw DomainError.invalid("channel_id", "channel_id must be a channel id (ch_…)")
            }
            f.channelId = ch
        }
        let page = try ctx.db.tenant(tenant) { c in
            try EventStore.list(c, tenantId: tenant, filter: f, now: ctx.now(), limit: limit, before: before)
        }
        return Endpoint.list(page) { $0.json }
    }

    static func getEvent(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let id = req.pathParameters["evt"] ?? ""
        guard let ev = try ctx.db.tenant(tenant, { c in try EventStore.get(c, tenantId: tenant, id: id, now: ctx.now()) }) else {
            throw Endpoint.notFound("event")
        }
        return .json(200, ev.json)
    }
}

extension Encode {
    /// `{id, object: "webhook_endpoint", url, events, description, status, disabled_reason,
    /// created_at, updated_at}` plus `secret` in the responses that make one.
    static func webhookEndpoint(_ e: WebhookEndpointRecord, secret: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(e.id), "object": "webhook_endpoint", "url": .string(e.url),
            "events": J.strs(e.events), "description": .string(e.description),
            "status": .string(e.status), "disabled_reason": J.str(e.disabledReason),
            "created_at": J.ts(e.createdAt), "updated_at": J.ts(e.updatedAt)
        ]
        if let secret { o["secret"] = .string(secret) }
        return .object(o)
    }

    /// One attempt of the delivery log: `{id, object: "webhook_delivery", endpoint_id, event_id,
    /// event_type, attempt, status_code, error, duration_ms, delivered_at}` (`delivered_at` is
    /// when the attempt was made, whatever its result).
    static func webhookAttempt(_ a: WebhookAttemptRecord, endpointId: String) -> JSONValue {
        .object([
            "id": .string(String(a.id)), "object": "webhook_delivery", "endpoint_id": .string(endpointId),
            "event_id": .string(a.eventId), "event_type": .string(a.eventType), "attempt": .int(Int64(a.attempt)),
            "status_code": a.statusCode.map { .int(Int64($0)) } ?? .null, "error": J.str(a.error),
            "duration_ms": .int(Int64(a.durationMs)), "delivered_at": J.ts(a.deliveredAt)
        ])
    }
}
