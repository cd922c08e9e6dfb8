import Foundation
import JSON

/// A fault the sandbox answers instead of success (after the request passed every check, so
/// authentication problems are still reported as such).
///
/// JSON (`POST /sandbox/faults`): `{"provider"?: "apns"|"fcm"|"oauth"|"broadcast"|"channels",
/// "token"?: "<device or FCM token, or apns-channel-id>", "status"?: 410, "reason"?: "Unregistered",
/// "retry_after"?: 3, "times"?: 1, "delay_seconds"?: 0.5}`. No `token` = every token; no
/// `provider` = APNs and FCM (broadcast, channel and OAuth faults are asked for by name); no
/// `times` = until removed; `status` 0/absent with `delay_seconds` = only a delay.
/// `delay_seconds` (0…120) holds the answer, not the request: the request is checked and
/// recorded when it arrives and answered that many seconds later (docs/providers.md "The local
/// sandbox's threads").
public struct SandboxFault: Sendable, Equatable {
    public var provider: String?
    public var token: String?
    public var status: Int
    public var reason: String?
    public var retryAfter: Int?
    public var times: Int?
    public var delaySeconds: Double

    public init(
        provider: String? = nil, token: String? = nil, status: Int = 0, reason: String? = nil, retryAfter: Int? = nil,
        times: Int? = nil, delaySeconds: Double = 0
    ) {
        self.provider = provider; self.token = token; self.status = status; self.reason = reason
        self.retryAfter = retryAfter; self.times = times; self.delaySeconds = delaySeconds
    }

    init(json v: JSONValue) throws {
        guard let o = v.objectValue else { throw SandboxError("a fault must be a JSON object") }
        let known: Set<String> = ["provider", "token", "status", "reason", "retry_after", "times", "delay_seconds"]
        if let extra = o.keys.first(where: { !known.contains($0) }) { throw SandboxError("unknown fault field \(extra)") }
        provider = o["provider"]?.stringValue
        if let p = provider, !["apns", "fcm", "oauth", "broadcast", "channels"].contains(p) {
            throw SandboxError("provider must be apns, fcm, oauth, broadcast or channels")
        }
        token = o["token"]?.stringValue
        if let s = o["status"], s != .null, s.intValue == nil { throw SandboxError("status must be an integer") }
        status = Int(o["status"]?.intValue ?? 0)
        if status != 0 && !(200...599).contains(status) { throw SandboxError("status must be an HTTP status") }
        reason = o["reason"]?.stringValue
        retryAfter = o["retry_after"]?.intValue.map(Int.init)
        times = o["times"]?.intValue.map(Int.init)
        delaySeconds = o["delay_seconds"]?.doubleValue ?? 0
        if delaySeconds < 0 || delaySeconds > 120 { throw SandboxError("delay_seconds must be 0…120") }
    }

    var json: JSONValue {
        .object([
            "provider": provider.map(JSONValue.string) ?? .null, "token": token.map(JSONValue.string) ?? .null,
            "status": .int(Int64(status)), "reason": reason.map(JSONValue.string) ?? .null,
            "retry_after": retryAfter.map { .int(Int64($0)) } ?? .null, "times": times.map { .int(Int64($0)) } ?? .null,
            "delay_seconds": .double(delaySeconds)
        ])
    }

    func matches(provider p: String, token t: String?) -> Bool {
        if let provider, provider != p { return false }
        if provider == nil && p != "apns" && p != "fcm" { return false }  // OAuth, broadcast and channel faults are asked for by name
        if let token, token != t { return false }
        return true
    }
}

/// One request the sandbox received on its APNs or FCM endpoint, with its answer.
public struct SandboxDelivery: Sendable {
    public let sequence: Int
    /// `apns`, `fcm` or `broadcast` (APNs broadcast).
    public let provider: String
    /// APNs device token from the path, FCM `message.token`, or a broadcast's `apns-channel-id`.
    public let token: String
    public let status: Int
    /// APNs `reason` / FCM `errorCode` or `status`; nil on success.
    public let reason: String?
    public let receivedAt: Date
    /// APNs request headers of interest (`apns-topic`, `apns-push-type`, `apns-priority`,
    /// `apns-expiration`, `apns-id`).
    public let headers: [String: String]
    /// APNs: the JWT `iat` and `kid` used (nil for FCM).
    public let jwtIssuedAt: Int64?
    public let jwtKeyId: String?
    /// The parsed request body (`{"aps": …}` or `{"message": …}`), or null when unparsable.
    public let payload: JSONValue
    /// A sandbox-only explanation of a rejection (never sent by Apple or Google).
    public let detail: String?

    public var accepted: Bool { (200..<300).contains(status) }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "sequence": .int(Int64(sequence)), "provider": .string(provider), "token": .string(token), "status": .int(Int64(status)),
            "reason": reason.map(JSONValue.string) ?? .null, "received_at": .string(isoFormat(receivedAt)),
            "headers": .object(headers.mapValues(JSONValue.string)), "payload": payload
        ]
        if let jwtIssuedAt { o["jwt_iat"] = .int(jwtIssuedAt) }
        if let jwtKeyId { o["jwt_kid"] = .string(jwtKeyId) }
        if let detail { o["detail"] = .string(detail) }
        return .object(o)
    }
}

/// One APNs provider token the sandbox saw for the first time.
public struct SandboxProviderToken: Sendable, Equatable {
    public let teamId: String
    public let keyId: String
    public let issuedAt: Int64
    /// Sandbox clock when it was first used.
    public let firstSeenAt: Date
}

/// Counters for tests and `GET /sandbox/stats`.
public struct SandboxStats: Sendable {
    public var apnsRequests = 0
    public var fcmRequests = 0
    /// `POST /4/broadcasts/apps/…` requests (every one, accepted or not).
    public var broadcastRequests = 0
    /// Channel management requests (`/1/apps/…/channels`, `…/all-channels`).
    public var channelRequests = 0
    /// `POST /token` requests (every one, accepted or not).
    public var tokenRequests = 0
    public var accessTokensIssued = 0
    /// Distinct APNs JWTs seen, in order of first use.
    public var providerTokens: [SandboxProviderToken] = []
    /// `429 TooManyProviderTokenUpdates` answers.
    public var tooManyProviderTokenUpdates = 0
    /// `403 ExpiredProviderToken` answers (real ones, by `iat` age, and injected ones).
    public var expiredProviderTokens = 0

    var json: JSONValue {
        .object([
            "apns_requests": .int(Int64(apnsRequests)), "fcm_requests": .int(Int64(fcmRequests)),
            "broadcast_requests": .int(Int64(broadcastRequests)), "channel_requests": .int(Int64(channelRequests)),
            "token_requests": .int(Int64(tokenRequests)), "access_tokens_issued": .int(Int64(accessTokensIssued)),
            "too_many_provider_token_updates": .int(Int64(tooManyProviderTokenUpdates)),
            "expired_provider_tokens": .int(Int64(expiredProviderTokens)),
            "provider_tokens": .array(
                providerTokens.map {
                    .object([
                        "team_id": .string($0.teamId), "key_id": .string($0.keyId),
                        "iat": .int($0.issuedAt), "first_seen_at": .string(isoFormat($0.firstSeenAt))
                    ])
                })
        ])
    }
}

struct SandboxError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

func isoFormat(_ d: Date) -> String {
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return f.string(from: d)
}
