import Foundation
import LiveRelayCore

/// One push attempt, fully built by the dispatcher (SPEC §8): who it is for, where it goes,
/// and the exact bytes.
public struct OutgoingPush: Sendable {
    public let tenantId: String
    public let operationId: String
    /// `ios` (APNs) or `android` (FCM).
    public let platform: String
    /// `sandbox` or `production`: which APNs host (`LIVERELAY_APNS_SANDBOX_URL` / `…_PRODUCTION_URL`).
    public let environment: String
    /// Bundle id / package name; APNs topic is `<appId>.push-type.liveactivity`.
    public let appId: String
    /// APNs push-to-start or update token (hex), or the FCM registration token. Never logged.
    public let deviceToken: String
    /// iOS: the APNs request body (`{"aps": …}`), already size-checked.
    public let apnsBody: [UInt8]?
    /// Android: the FCM HTTP v1 request body (`{"message": …}`), already size-checked.
    public let fcmBody: [UInt8]?
    /// `apns-priority`: 5 or 10.
    public let priority: Int
    /// `apns-expiration` (sent as whole epoch seconds); FCM `ttl` was derived from it.
    public let expiration: Date
    /// `apns-id` of this attempt (a UUID, lowercase).
    public let apnsId: String

    public init(tenantId: String, operationId: String, platform: String, environment: String, appId: String, deviceToken: String,
                apnsBody: [UInt8]?, fcmBody: [UInt8]?, priority: Int, expiration: Date, apnsId: String) {
        self.tenantId = tenantId; self.operationId = operationId; self.platform = platform; self.environment = environment
        self.appId = appId; self.deviceToken = deviceToken; self.apnsBody = apnsBody; self.fcmBody = fcmBody
        self.priority = priority; self.expiration = expiration; self.apnsId = apnsId
    }
}

/// What came of one push attempt.
public enum PushResult: Sendable, Equatable {
    /// The provider answered; classified by `ProviderOutcome.apns/.fcm` (after at most one
    /// credential refresh and retry, done inside the sender).
    case outcome(ProviderOutcome)
    /// Provably not processed (GOAWAY above `last_stream_id`, refused stream, connection
    /// failure before sending): safe to resend with backoff (SPEC §5).
    case notProcessed(String)
    /// The request may have reached the provider (connection lost after sending, timeout):
    /// SPEC §5 "outcome unknown".
    case possiblyProcessed(String)
    /// The tenant has no (valid) provider credentials for this platform/topic.
    case noCredentials(String)
}

/// Sends pushes to APNs/FCM (or the local sandbox). Implementations are thread-safe and keep
/// their own connection pools and token caches; `send` blocks the calling worker thread.
public protocol PushSender: Sendable {
    func send(_ push: OutgoingPush) -> PushResult
}
