import Foundation
import JSON

/// The lifecycle event a push carries: the APNs `aps.event` value and the FCM `data.event`
/// value (docs/providers.md). Also the kind of an operation (docs/write-semantics.md `operation.kind`).
public enum PushEvent: String, Sendable, CaseIterable {
    /// Remote start (APNs push-to-start; FCM data message the device renders as a start).
    case start
    /// New content state for a running activity.
    case update
    /// Ends the activity (optionally with a final state and a dismissal date).
    case end
}

/// A visible alert sent with a start or update (docs/write-semantics.md `alert: {title, body, sound?}`).
/// Title and body are required by the request decoder; `sound` is the name of a sound file in
/// the app bundle (APNs only: FCM data carries `alert_title`/`alert_body`, no sound).
public struct PushAlert: Sendable, Equatable {
    /// Alert title shown by the system.
    public var title: String
    /// Alert body shown by the system.
    public var body: String
    /// Sound file name, or nil for no `sound` key (APNs then plays no sound).
    public var sound: String?

    public init(title: String, body: String, sound: String? = nil) {
        self.title = title
        self.body = body
        self.sound = sound
    }

    /// The alert as stored (`{"title", "body", "sound"?}` JSON text).
    public var jsonText: String {
        var o: [String: JSONValue] = ["title": .string(title), "body": .string(body)]
        if let sound { o["sound"] = .string(sound) }
        return JSONValue.object(o).jsonString
    }

    /// An alert from its stored JSON text; nil when the text is not an alert object.
    public init?(jsonText text: String) {
        guard let o = try? JSONValue.parse(text), let t = o["title"]?.stringValue, let b = o["body"]?.stringValue else { return nil }
        self.init(title: t, body: b, sound: o["sound"]?.stringValue)
    }
}

/// The APNs request body for an ActivityKit push (docs/providers.md "Body"), built as a `JSONValue` and
/// serialized with `JSONValue.serialized()` so the bytes measured against `maxBytes` are
/// exactly the bytes sent.
///
/// Shape (keys that are nil are omitted; nothing is defaulted):
/// ```
/// {"aps": {"timestamp": <epoch s>, "event": "start|update|end", "content-state": {...},
///          "stale-date"?: <epoch s>, "relevance-score"?: <number>,
///          "alert"?: {"title": "...", "body": "...", "sound"?: "..."},
///          "dismissal-date"?: <epoch s>,
///          // start only:
///          "attributes-type": "...",
///          "attributes": {"target_id": "...", "template_version": "...", "business_key"?: "..."},
///          "input-push-token": 1}}      // or "input-push-channel": "<apns channel id>" (docs/channels.md)
/// ```
/// Every time field is whole epoch **seconds**, rounded down (`Timestamp.epochSeconds`, docs/
/// §3/§8); for any date before year 2286 that is < 10^10. Range checks of the request times
/// (e.g. `dismiss_at` ≤ now + 4 h, docs/limits.md) belong to the write validator, not here.
///
/// Sources: Apple, "Starting and updating Live Activities with ActivityKit push notifications"
/// and "Sending notification requests to APNs"; docs/providers.md.
public struct APNsPayload: Sendable, Equatable {
    /// The static part of a remote start (APNs `attributes-type` and `attributes`).
    public struct StartAttributes: Sendable, Equatable {
        /// The template's `ActivityAttributes` type name (APNs `attributes-type`).
        public var attributesType: String
        /// The LiveRelay target id (`tgt_…`) the device reports tokens for.
        public var targetId: String
        /// The template version (`tv_…`) the device must render with.
        public var templateVersion: String
        /// The tenant's business key, when the start named one.
        public var businessKey: String?
        /// The APNs channel id of a channel member on iOS 18+ (docs/channels.md "Joining a
        /// channel"): sent as `input-push-channel` instead of `input-push-token: 1`.
        public var inputPushChannel: String?
    }

    /// docs/limits.md: the whole `{"aps":...}` body may be at most 4096 bytes (APNs' limit for
    /// Live Activity pushes, Apple "Sending notification requests to APNs").
    public static let maxBytes = 4096

    /// `aps.event`.
    public var event: PushEvent
    /// `aps.timestamp`; APNs/ActivityKit drop a push whose timestamp is older than the last one.
    public var timestamp: Date
    /// `aps.content-state`: the full committed state snapshot (a JSON object). For a stateless
    /// end the dispatcher passes the target's current committed state.
    public var contentState: JSONValue
    /// `aps.stale-date`, from `stale_at`.
    public var staleDate: Date?
    /// `aps.relevance-score`, from `relevance_score` (0–1, validated upstream).
    public var relevanceScore: Double?
    /// `aps.alert`; only when the request had one (no default alert or sound).
    public var alert: PushAlert?
    /// `aps.dismissal-date`, from `dismiss_at` (APNs honours it on `end`).
    public var dismissalDate: Date?
    /// Start-only fields; used only when `event == .start` (required then).
    public var start: StartAttributes?

    public init(
        event: PushEvent, timestamp: Date, contentState: JSONValue, staleDate: Date? = nil,
        relevanceScore: Double? = nil, alert: PushAlert? = nil, dismissalDate: Date? = nil,
        start: StartAttributes? = nil
    ) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDate = staleDate
        self.relevanceScore = relevanceScore
        self.alert = alert
        self.dismissalDate = dismissalDate
        self.start = start
    }

    /// The body as a JSON value (shape in the type documentation).
    public var json: JSONValue {
        func seconds(_ d: Date) -> JSONValue { .int(Timestamp.epochSeconds(d)) }
        var aps: [String: JSONValue] = [
            "timestamp": seconds(timestamp),
            "event": .string(event.rawValue),
            "content-state": contentState
        ]
        if let staleDate { aps["stale-date"] = seconds(staleDate) }
        if let relevanceScore { aps["relevance-score"] = .double(relevanceScore) }
        if let alert {
            var a: [String: JSONValue] = ["title": .string(alert.title), "body": .string(alert.body)]
            if let sound = alert.sound { a["sound"] = .string(sound) }
            aps["alert"] = .object(a)
        }
        if let dismissalDate { aps["dismissal-date"] = seconds(dismissalDate) }
        if event == .start, let start {
            var attrs: [String: JSONValue] = [
                "target_id": .string(start.targetId),
                "template_version": .string(start.templateVersion)
            ]
            if let bk = start.businessKey { attrs["business_key"] = .string(bk) }
            aps["attributes-type"] = .string(start.attributesType)
            aps["attributes"] = .object(attrs)
            if let channel = start.inputPushChannel {
                aps["input-push-channel"] = .string(channel)
            } else {
                aps["input-push-token"] = .int(1)
            }
        }
        return .object(["aps": .object(aps)])
    }

    /// The exact request body bytes: compact canonical JSON (`JSONValue.serialized()`).
    public func bytes() -> [UInt8] { json.serialized() }

    /// The body bytes after checking them against `maxBytes`.
    /// - Throws: `DomainError` 413 `PAYLOAD_TOO_LARGE` (see `checkSize`).
    public func checkedBytes() throws -> [UInt8] {
        let b = bytes()
        try APNsPayload.checkSize(b)
        return b
    }

    /// Builds the body (see the type documentation); `start` is used only for `.start`.
    public static func build(
        event: PushEvent, timestamp: Date, contentState: JSONValue, staleDate: Date? = nil,
        relevanceScore: Double? = nil, alert: PushAlert? = nil, dismissalDate: Date? = nil,
        start: StartAttributes? = nil
    ) -> JSONValue {
        APNsPayload(
            event: event, timestamp: timestamp, contentState: contentState, staleDate: staleDate,
            relevanceScore: relevanceScore, alert: alert, dismissalDate: dismissalDate, start: start
        ).json
    }

    /// `build(...)` serialized: the exact bytes sent (not yet size-checked).
    public static func bytes(
        event: PushEvent, timestamp: Date, contentState: JSONValue, staleDate: Date? = nil,
        relevanceScore: Double? = nil, alert: PushAlert? = nil, dismissalDate: Date? = nil,
        start: StartAttributes? = nil
    ) -> [UInt8] {
        build(
            event: event, timestamp: timestamp, contentState: contentState, staleDate: staleDate,
            relevanceScore: relevanceScore, alert: alert, dismissalDate: dismissalDate, start: start
        ).serialized()
    }

    /// docs/write-semantics.md rule 8 / §7: a body over `maxBytes` (counted in UTF-8 bytes, not characters).
    /// - Throws: `DomainError(status: 413, code: "PAYLOAD_TOO_LARGE", details: ["bytes": n,
    ///   "actual": n, "limit": 4096, "provider": "apns"])`.
    public static func checkSize(_ bytes: [UInt8]) throws {
        if let e = providerPayloadTooLargeError(bytes: bytes.count, limit: maxBytes, provider: "apns", what: "APNs payload") { throw e }
    }

    /// The APNs request headers other than `authorization` (added by the sender with its JWT)
    /// and the HTTP/2 pseudo-headers, in this order: `apns-topic`
    /// (`<bundle>.push-type.liveactivity`), `apns-push-type` (`liveactivity`), `apns-priority`
    /// (5 or 10, validated upstream), `apns-expiration` (epoch seconds, floor; from
    /// `expires_at` or now + `LIVERELAY_DEFAULT_EXPIRATION_SECONDS`), `apns-id` (canonical
    /// UUID of this send attempt). Source: Apple "Sending notification requests to APNs"; docs/providers.md.
    public static func headers(topicBundleId: String, priority: Int, expiration: Date, apnsId: String) -> [(String, String)] {
        [
            ("apns-topic", topicBundleId + ".push-type.liveactivity"),
            ("apns-push-type", "liveactivity"),
            ("apns-priority", String(priority)),
            ("apns-expiration", String(Timestamp.epochSeconds(expiration))),
            ("apns-id", apnsId)
        ]
    }
}

/// The `413 PAYLOAD_TOO_LARGE` of docs/write-semantics.md rule 8 when `bytes > limit`, else nil.
/// `details`: `bytes` and `actual` (the measured size; §5 and §3 names), `limit`, `provider`.
func providerPayloadTooLargeError(bytes: Int, limit: Int, provider: String, what: String) -> DomainError? {
    guard bytes > limit else { return nil }
    return DomainError(
        status: 413, code: "PAYLOAD_TOO_LARGE",
        message: "The \(what) would be \(bytes) bytes; the limit is \(limit) bytes. Send a smaller state.",
        details: [
            "bytes": .int(Int64(bytes)), "actual": .int(Int64(bytes)), "limit": .int(Int64(limit)),
            "provider": .string(provider)
        ])
}
