import Foundation
import JSON

/// `POST /v1/remote-updates/channels` body (docs/channels.md "Resources").
public struct ChannelCreateRequest: Sendable, Equatable {
    /// Bundle id of the iOS app whose APNs channel is created.
    public let appId: String
    /// `sandbox` or `production`.
    public let environment: String
    public let activityType: String
    public let attributesType: String
    /// The state schema as sent (compiled and checked by `ChannelRequests.create`).
    public let schema: JSONValue?
    /// `none` (default) or `most_recent` (APNs `message-storage-policy` 0 or 1).
    public let storagePolicy: String
    public let label: String
    public let idempotencyKey: String

    /// APNs `message-storage-policy`: 0 for `none`, 1 for `most_recent` (Apple, "Sending channel management requests to APNs").
    public var apnsStoragePolicy: Int { storagePolicy == "most_recent" ? 1 : 0 }
}

/// `POST …/channels/{ch}/update` body.
public struct ChannelUpdateRequest: Sendable, Equatable {
    public let state: JSONValue
    public let expectedRevision: Int64
    public let idempotencyKey: String
    public let alert: PushAlert?
    /// `priority` may be 1, 5 or 10 here (1 only for channels: APNs broadcasts).
    public let options: WriteOptions
}

/// `POST …/channels/{ch}/end` body; `state` nil = stateless end (free).
public struct ChannelEndRequest: Sendable, Equatable {
    public let idempotencyKey: String
    public let state: JSONValue?
    public let expectedRevision: Int64?
    public let dismissAt: Date?
}

/// Parsing of the channel bodies: rule 2 of docs/write-semantics.md (shape, unknown fields
/// rejected, each error naming its field), as `WriteRequests` does for targets.
public enum ChannelRequests {
    /// Lengths of `activity_type` / `attributes_type` (as the prepare request, docs/limits.md).
    public static let maxTypeLength = 128

    /// The create body. `schema` is compiled: a bad one → `400 INVALID_STATE_SCHEMA` with `details.pointer`.
    public static func create(_ body: JSONValue) throws -> ChannelCreateRequest {
        var r = try RequestReader(body)
        let app = try r.string("app_id", maxLength: 255)
        let env = try r.enumValue("environment", ["sandbox", "production"])
        let type = try r.string("activity_type", maxLength: maxTypeLength)
        let attrs = try r.string("attributes_type", maxLength: maxTypeLength)
        let schema = r.raw("schema")
        if let schema { _ = try StateSchema.compile(schema) }
        let policy = try r.optionalEnum("storage_policy", ["none", "most_recent"]) ?? "none"
        let label = try r.optionalString("label", maxLength: 200) ?? ""
        let key = try r.idempotencyKey()
        try r.finish()
        return ChannelCreateRequest(
            appId: app, environment: env, activityType: type, attributesType: attrs, schema: schema,
            storagePolicy: policy, label: label, idempotencyKey: key)
    }

    /// The update body: `state`, `expected_revision`, `idempotency_key`, optional `alert`,
    /// `stale_at`, `relevance_score`, `priority` (1, 5 or 10), `expires_at`.
    public static func update(_ body: JSONValue) throws -> ChannelUpdateRequest {
        var r = try RequestReader(body)
        let state = try WriteRequests.state(&r, required: true)!
        guard let rev = try r.optionalInt("expected_revision", 0...Int64.max) else {
            throw DomainError.invalid("expected_revision", "expected_revision is required on a channel update")
        }
        let key = try r.idempotencyKey()
        let alert = try WriteRequests.alert(&r)
        var o = try WriteRequests.options(&r, priority: false)
        if let p = try r.optionalInt("priority", 0...100) {
            guard p == 1 || p == 5 || p == 10 else { throw DomainError.invalid("priority", "priority must be 1, 5 or 10 on a channel") }
            o.priority = Int(p)
        }
        try r.finish()
        return ChannelUpdateRequest(state: state, expectedRevision: rev, idempotencyKey: key, alert: alert, options: o)
    }

    /// The end body: `idempotency_key`, optional `state` (then `expected_revision` is required), `dismiss_at`.
    public static func end(_ body: JSONValue) throws -> ChannelEndRequest {
        var r = try RequestReader(body)
        let key = try r.idempotencyKey()
        let state = try WriteRequests.state(&r, required: false)
        let rev = try r.optionalInt("expected_revision", 0...Int64.max)
        if state != nil && rev == nil {
            throw DomainError.invalid("expected_revision", "an end with a new final state requires expected_revision")
        }
        let dismiss = try r.optionalTimestamp("dismiss_at")
        try r.finish()
        return ChannelEndRequest(idempotencyKey: key, state: state, expectedRevision: rev, dismissAt: dismiss)
    }

    /// A target id as long as any real one, for measuring payloads every member will get.
    static let placeholderTargetId = "tgt_" + String(repeating: "0", count: Identifier.bodyLength)
    /// A template version id as long as any real one (`tv_` + 52 base32 characters of SHA-256).
    static let placeholderTemplateVersion = "tv_" + String(repeating: "a", count: 52)

    /// The 4096-byte pre-check of a channel write (docs/channels.md): the APNs body (the
    /// broadcast and every iOS fan-out send) and the FCM `data` of an Android member (with its
    /// `channel_id`) are built with the longest ids a member can have and measured.
    /// - Throws: `DomainError` 413 `PAYLOAD_TOO_LARGE` with `details.bytes` and `details.limit`.
    public static func checkPayload(
        channelId: String, event: PushEvent, state: JSONValue, alert: PushAlert?, staleAt: Date?,
        relevanceScore: Double?, dismissAt: Date?, now: Date
    ) throws {
        let c = DeliveryPayload.Content(
            event: event, targetId: placeholderTargetId, revision: Int64.max, templateVersion: placeholderTemplateVersion,
            state: state, alert: alert, staleAt: staleAt, relevanceScore: relevanceScore, dismissAt: dismissAt)
        try APNsPayload.checkSize(DeliveryPayload.apns(c, timestamp: now).bytes())
        var m = DeliveryPayload.fcm(c, token: "", timestamp: now, ttlSeconds: 0)
        m.channelId = channelId
        try FCMMessage.checkDataSize(m.dataBytes())
    }
}
