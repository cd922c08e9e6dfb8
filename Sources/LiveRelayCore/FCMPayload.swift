import Foundation
import JSON

/// The FCM HTTP v1 `messages:send` request body for an Android 16 Live Update (docs/providers.md): a
/// data-only message (no `notification` key) the app's `FirebaseMessagingService` renders
/// itself.
///
/// Shape:
/// ```
/// {"message": {"token": "<installation FCM token>",
///              "data": {"target_id", "event", "revision", "timestamp", "state",
///                       "template_version", "alert_title"?, "alert_body"?,
///                       "stale_at"?, "dismiss_at"?},
///              "android": {"priority": "HIGH", "ttl": "<seconds>s"}}}
/// ```
/// Every `data` value is a string (FCM requires it): `event` is `start|update|end`;
/// `revision` is the decimal integer; `state` is the state serialized as compact canonical
/// JSON text; `timestamp`, `stale_at` and `dismiss_at` are whole **epoch seconds** (floor) in
/// decimal, the same numbers APNs receives (docs/http-conventions.md/docs/providers.md), e.g. `"1792328400"`. `alert.sound`
/// has no FCM field and is not sent.
///
/// The limit (docs/limits.md) is measured on the serialized `data` object, exactly as
/// `JSONValue.serialized()` writes it.
///
/// Sources: Google, "FCM HTTP v1 API" (`projects.messages`, `AndroidConfig.ttl` as a
/// duration string, `AndroidMessagePriority.HIGH`); docs/limits.md/docs/providers.md.
public struct FCMMessage: Sendable, Equatable {
    /// docs/limits.md: the serialized `data` object may be at most 4096 bytes.
    public static let maxDataBytes = 4096
    /// FCM's largest `ttl`: 4 weeks, in seconds (Google "FCM HTTP v1 API", `AndroidConfig`).
    public static let maxTTLSeconds: Int64 = 2_419_200

    /// The installation's FCM registration token (`message.token`).
    public var token: String
    /// `data.target_id` (`tgt_…`).
    public var targetId: String
    /// `data.event`.
    public var event: PushEvent
    /// `data.revision`: the target revision this state belongs to.
    public var revision: Int64
    /// `data.timestamp` (epoch seconds, floor): strictly increasing per target, as for APNs.
    public var timestamp: Date
    /// `data.state`: the full committed state (a JSON object), sent as JSON text.
    public var state: JSONValue
    /// `data.template_version` (`tv_…`).
    public var templateVersion: String
    /// `data.alert_title` / `data.alert_body` when the request had an alert.
    public var alert: PushAlert?
    /// `data.stale_at` (epoch seconds, floor).
    public var staleAt: Date?
    /// `data.dismiss_at` (epoch seconds, floor).
    public var dismissAt: Date?
    /// `android.ttl` in whole seconds (see `ttlSeconds(expiration:now:)`).
    public var ttlSeconds: Int64
    /// `data.channel_id` (`ch_…`) when the target is a fan-out member of a channel (docs/channels.md).
    public var channelId: String?

    public init(
        token: String, targetId: String, event: PushEvent, revision: Int64, timestamp: Date,
        state: JSONValue, templateVersion: String, alert: PushAlert? = nil, staleAt: Date? = nil,
        dismissAt: Date? = nil, ttlSeconds: Int64
    ) {
        self.token = token
        self.targetId = targetId
        self.event = event
        self.revision = revision
        self.timestamp = timestamp
        self.state = state
        self.templateVersion = templateVersion
        self.alert = alert
        self.staleAt = staleAt
        self.dismissAt = dismissAt
        self.ttlSeconds = ttlSeconds
    }

    /// `android.ttl` seconds from `expires_at`: `expiration − now`, rounded down, clamped to
    /// 0…`maxTTLSeconds` (0 = deliver now or drop, FCM semantics).
    public static func ttlSeconds(expiration: Date, now: Date) -> Int64 {
        let s = (expiration.timeIntervalSince1970 - now.timeIntervalSince1970).rounded(.down)
        guard s.isFinite, s > 0 else { return 0 }
        return s >= Double(maxTTLSeconds) ? maxTTLSeconds : Int64(s)
    }

    /// The `data` map: every value a string (see the type documentation).
    public var data: [String: String] {
        var d: [String: String] = [
            "target_id": targetId,
            "event": event.rawValue,
            "revision": String(revision),
            "timestamp": String(Timestamp.epochSeconds(timestamp)),
            "state": state.jsonString,
            "template_version": templateVersion
        ]
        if let alert {
            d["alert_title"] = alert.title
            d["alert_body"] = alert.body
        }
        if let staleAt { d["stale_at"] = String(Timestamp.epochSeconds(staleAt)) }
        if let dismissAt { d["dismiss_at"] = String(Timestamp.epochSeconds(dismissAt)) }
        if let channelId { d["channel_id"] = channelId }
        return d
    }

    /// `data` as a JSON object of strings.
    public var dataJSON: JSONValue { .object(data.mapValues { .string($0) }) }

    /// The serialized `data` object: the bytes the §7 limit is measured on.
    public func dataBytes() -> [UInt8] { dataJSON.serialized() }

    /// The whole request body `{"message": {...}}` as JSON.
    public var json: JSONValue {
        .object([
            "message": .object([
                "token": .string(token),
                "data": dataJSON,
                "android": .object(["priority": "HIGH", "ttl": .string("\(max(0, ttlSeconds))s")])
            ])
        ])
    }

    /// The exact request body bytes (compact canonical JSON), not size-checked.
    public func bytes() -> [UInt8] { json.serialized() }

    /// The request body bytes after checking the `data` object against `maxDataBytes`.
    /// - Throws: `DomainError` 413 `PAYLOAD_TOO_LARGE` (see `checkDataSize`).
    public func checkedBytes() throws -> [UInt8] {
        try FCMMessage.checkDataSize(dataBytes())
        return bytes()
    }

    /// docs/write-semantics.md rule 8 / §7: serialized `data` over `maxDataBytes` (UTF-8 bytes).
    /// - Throws: `DomainError(status: 413, code: "PAYLOAD_TOO_LARGE", details: ["bytes": n,
    ///   "actual": n, "limit": 4096, "provider": "fcm"])`.
    public static func checkDataSize(_ dataBytes: [UInt8]) throws {
        if let e = providerPayloadTooLargeError(bytes: dataBytes.count, limit: maxDataBytes, provider: "fcm", what: "FCM data object") { throw e }
    }
}
