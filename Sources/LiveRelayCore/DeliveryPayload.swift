import Foundation
import JSON

/// Builds and measures the exact provider payload of a write before it is committed
/// (docs/write-semantics.md rule 8: "The full provider payload is built and measured"): the APNs body for
/// iOS (4096 bytes), the FCM `data` object for Android (4096 bytes).
public enum DeliveryPayload {
    /// What a write will send.
    public struct Content: Sendable {
        public var event: PushEvent
        public var targetId: String
        public var revision: Int64
        public var templateVersion: String
        public var state: JSONValue
        public var alert: PushAlert?
        public var staleAt: Date?
        public var relevanceScore: Double?
        public var dismissAt: Date?
        /// Start only: `attributes-type` and `business_key`.
        public var attributesType: String?
        public var businessKey: String?
        /// The channel of a member (docs/channels.md): FCM `data.channel_id`; on an iOS 18+
        /// start, `inputPushChannel` is the APNs channel id sent as `input-push-channel`.
        public var channelId: String?
        public var inputPushChannel: String?
        public init(
            event: PushEvent, targetId: String, revision: Int64, templateVersion: String, state: JSONValue, alert: PushAlert?,
            staleAt: Date?, relevanceScore: Double?, dismissAt: Date?, attributesType: String? = nil, businessKey: String? = nil,
            channelId: String? = nil, inputPushChannel: String? = nil
        ) {
            self.event = event; self.targetId = targetId; self.revision = revision; self.templateVersion = templateVersion
            self.state = state; self.alert = alert; self.staleAt = staleAt; self.relevanceScore = relevanceScore
            self.dismissAt = dismissAt; self.attributesType = attributesType; self.businessKey = businessKey
            self.channelId = channelId; self.inputPushChannel = inputPushChannel
        }
    }

    /// The APNs body for `c` at `timestamp`.
    public static func apns(_ c: Content, timestamp: Date) -> APNsPayload {
        APNsPayload(
            event: c.event, timestamp: timestamp, contentState: c.state, staleDate: c.staleAt, relevanceScore: c.relevanceScore,
            alert: c.alert, dismissalDate: c.dismissAt,
            start: c.event == .start
                ? APNsPayload.StartAttributes(
                    attributesType: c.attributesType ?? "", targetId: c.targetId,
                    templateVersion: c.templateVersion, businessKey: c.businessKey,
                    inputPushChannel: c.inputPushChannel) : nil)
    }

    /// The FCM message for `c` to `token` at `timestamp`.
    public static func fcm(_ c: Content, token: String, timestamp: Date, ttlSeconds: Int64) -> FCMMessage {
        var m = FCMMessage(
            token: token, targetId: c.targetId, event: c.event, revision: c.revision, timestamp: timestamp, state: c.state,
            templateVersion: c.templateVersion, alert: c.alert, staleAt: c.staleAt, dismissAt: c.dismissAt, ttlSeconds: ttlSeconds)
        m.channelId = c.channelId
        return m
    }

    /// Measures the payload for `platform` (`ios`/`android`).
    /// - Throws: `DomainError` 413 `PAYLOAD_TOO_LARGE` with `details.bytes` and `details.limit`.
    public static func check(platform: String, _ c: Content, now: Date) throws {
        if platform == "android" {
            try FCMMessage.checkDataSize(fcm(c, token: "", timestamp: now, ttlSeconds: 0).dataBytes())
        } else {
            try APNsPayload.checkSize(apns(c, timestamp: now).bytes())
        }
    }
}
