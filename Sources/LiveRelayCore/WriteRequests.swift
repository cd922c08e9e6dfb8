import Foundation
import JSON

/// The optional presentation fields every write may carry (docs/write-semantics.md).
public struct WriteOptions: Sendable, Equatable {
    /// ActivityKit stale date.
    public var staleAt: Date?
    /// 0–1 (ActivityKit relevance score).
    public var relevanceScore: Double?
    /// APNs priority, 5 or 10 (default 10).
    public var priority: Int
    /// Do not deliver after this time (→ `apns-expiration`, FCM `ttl`, status `expired`).
    public var expiresAt: Date?
    public init(staleAt: Date? = nil, relevanceScore: Double? = nil, priority: Int = 10, expiresAt: Date? = nil) {
        self.staleAt = staleAt; self.relevanceScore = relevanceScore; self.priority = priority; self.expiresAt = expiresAt
    }
}

/// `POST /v1/remote-updates/live-activities/start` body (docs/write-semantics.md).
public struct StartRequest: Sendable, Equatable {
    public let startTargetId: String
    public let templateVersion: String
    public let state: JSONValue
    /// Required by rule 4 (checked there, after readiness and template match).
    public let alert: PushAlert?
    public let idempotencyKey: String
    public let businessKey: String?
    public let businessGeneration: String?
    public let options: WriteOptions
    /// Joins this channel (docs/channels.md "Joining a channel").
    public var channelId: String? = nil
}

/// `POST /v1/remote-updates/live-activities/update` body.
public struct UpdateRequest: Sendable, Equatable {
    public let targetId: String
    public let state: JSONValue
    public let expectedRevision: Int64
    public let idempotencyKey: String
    public let sourceVersion: Int64?
    public let alert: PushAlert?
    public let options: WriteOptions
}

/// `POST /v1/remote-updates/live-activities/end` body; `state` nil = stateless cleanup.
public struct EndRequest: Sendable, Equatable {
    public let targetId: String
    public let idempotencyKey: String
    public let state: JSONValue?
    public let expectedRevision: Int64?
    public let dismissAt: Date?
    public let expiresAt: Date?
}

/// `POST /v1/installations/{id}/targets` body: local start reservation.
public struct ReservationRequest: Sendable, Equatable {
    public let activityType: String
    public let businessKey: String
    public let businessGeneration: String
    public let idempotencyKey: String
    public let state: JSONValue
    public let staleAt: Date?
    public let relevanceScore: Double?
    /// The app started the activity with `pushType: .channel(id)` (docs/channels.md).
    public var channelId: String? = nil
}

/// Parsing of the write bodies: rule 2 of docs/write-semantics.md (shape, unknown fields rejected, each
/// error naming its field). Semantic rules (readiness, revisions, schema) come later.
public enum WriteRequests {
    /// Business key / generation: 1–255 characters each.
    public static let maxBusinessKeyLength = 255

    static func alert(_ r: inout RequestReader) throws -> PushAlert? {
        guard var a = try r.optionalObject("alert") else { return nil }
        let title = try a.string("title", minLength: 1, maxLength: 1024)
        let body = try a.string("body", minLength: 1, maxLength: 4096)
        let sound = try a.optionalString("sound", minLength: 1, maxLength: 255)
        try a.finish()
        return PushAlert(title: title, body: body, sound: sound)
    }

    static func state(_ r: inout RequestReader, required: Bool) throws -> JSONValue? {
        guard let s = r.raw("state") else {
            if required { throw DomainError.invalid("state", "state is required") }
            return nil
        }
        try StateSchema.checkStateShape(s, field: "state")
        return s
    }

    static func options(_ r: inout RequestReader, staleAt: Bool = true, relevance: Bool = true, priority: Bool = true) throws -> WriteOptions {
        var o = WriteOptions()
        if staleAt { o.staleAt = try r.optionalTimestamp("stale_at") }
        if relevance { o.relevanceScore = try r.optionalDouble("relevance_score", 0...1) }
        if priority, let p = try r.optionalInt("priority", 0...100) {
            guard p == 5 || p == 10 else { throw DomainError.invalid("priority", "priority must be 5 or 10") }
            o.priority = Int(p)
        }
        o.expiresAt = try r.optionalTimestamp("expires_at")
        return o
    }

    static func business(_ r: inout RequestReader, required: Bool) throws -> (String?, String?) {
        let key = try r.optionalString("business_key", minLength: 1, maxLength: maxBusinessKeyLength)
        let gen = try r.optionalString("business_generation", minLength: 1, maxLength: maxBusinessKeyLength)
        if required || key != nil || gen != nil {
            guard key != nil else { throw DomainError.invalid("business_key", "business_key is required with business_generation") }
            guard gen != nil else { throw DomainError.invalid("business_generation", "business_generation is required with business_key") }
        }
        return (key, gen)
    }

    static func id(_ r: inout RequestReader, _ field: String, _ kind: IdKind) throws -> String {
        let v = try r.string(field, maxLength: 64)
        guard Identifier.isValid(v, kind: kind) else { throw DomainError.invalid(field, "\(field) must be a \(kind.rawValue)_… id") }
        return v
    }

    /// An optional `channel_id` (`ch_…`).
    static func optionalChannelId(_ r: inout RequestReader) throws -> String? {
        guard r.raw("channel_id") != nil else { return nil }
        return try id(&r, "channel_id", .channel)
    }

    /// The target id of an update/end body, read first so coverage (rule 1) can be decided
    /// before the rest of the shape (rule 2).
    public static func targetId(_ body: JSONValue) throws -> String {
        var r = try RequestReader(body)
        return try id(&r, "target_id", .target)
    }

    /// The start target id of a start body, for rule 1.
    public static func startTargetId(_ body: JSONValue) throws -> String {
        var r = try RequestReader(body)
        return try id(&r, "start_target_id", .startTarget)
    }

    public static func start(_ body: JSONValue) throws -> StartRequest {
        var r = try RequestReader(body)
        let st = try id(&r, "start_target_id", .startTarget)
        let tv = try r.string("template_version", maxLength: 128)
        let state = try state(&r, required: true)!
        let alert = try alert(&r)
        let key = try r.idempotencyKey()
        let (bk, bg) = try business(&r, required: false)
        let opts = try options(&r)
        let channel = try optionalChannelId(&r)
        try r.finish()
        var s = StartRequest(
            startTargetId: st, templateVersion: tv, state: state, alert: alert, idempotencyKey: key,
            businessKey: bk, businessGeneration: bg, options: opts)
        s.channelId = channel
        return s
    }

    public static func update(_ body: JSONValue) throws -> UpdateRequest {
        var r = try RequestReader(body)
        let tgt = try id(&r, "target_id", .target)
        let state = try state(&r, required: true)!
        guard let rev = try r.optionalInt("expected_revision", 1...Int64.max) else {
            throw DomainError.invalid("expected_revision", "expected_revision is required on update")
        }
        let key = try r.idempotencyKey()
        let sv = try r.optionalInt("source_version", 0...Int64.max)
        let alert = try alert(&r)
        let opts = try options(&r)
        try r.finish()
        return UpdateRequest(
            targetId: tgt, state: state, expectedRevision: rev, idempotencyKey: key, sourceVersion: sv,
            alert: alert, options: opts)
    }

    public static func end(_ body: JSONValue) throws -> EndRequest {
        var r = try RequestReader(body)
        let tgt = try id(&r, "target_id", .target)
        let key = try r.idempotencyKey()
        let state = try state(&r, required: false)
        let rev = try r.optionalInt("expected_revision", 1...Int64.max)
        if state != nil && rev == nil {
            throw DomainError.invalid("expected_revision", "an end with a new final state requires expected_revision")
        }
        let dismiss = try r.optionalTimestamp("dismiss_at")
        let expires = try r.optionalTimestamp("expires_at")
        try r.finish()
        return EndRequest(targetId: tgt, idempotencyKey: key, state: state, expectedRevision: rev, dismissAt: dismiss, expiresAt: expires)
    }

    public static func reservation(_ body: JSONValue) throws -> ReservationRequest {
        var r = try RequestReader(body)
        let type = try r.string("activity_type", maxLength: 128)
        let (bk, bg) = try business(&r, required: true)
        let key = try r.idempotencyKey()
        let state = try state(&r, required: true)!
        let stale = try r.optionalTimestamp("stale_at")
        let rel = try r.optionalDouble("relevance_score", 0...1)
        let channel = try optionalChannelId(&r)
        try r.finish()
        var res = ReservationRequest(
            activityType: type, businessKey: bk!, businessGeneration: bg!, idempotencyKey: key, state: state,
            staleAt: stale, relevanceScore: rel)
        res.channelId = channel
        return res
    }
}
