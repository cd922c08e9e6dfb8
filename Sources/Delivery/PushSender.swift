import Foundation
import LiveRelayCore
import Locking

/// One push attempt, fully built by the dispatcher (docs/providers.md): who it is for, where it goes,
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

    public init(
        tenantId: String, operationId: String, platform: String, environment: String, appId: String, deviceToken: String,
        apnsBody: [UInt8]?, fcmBody: [UInt8]?, priority: Int, expiration: Date, apnsId: String
    ) {
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
    /// failure before sending): safe to resend with backoff (docs/write-semantics.md).
    case notProcessed(String)
    /// The request may have reached the provider (connection lost after sending, timeout):
    /// docs/write-semantics.md "outcome unknown".
    case possiblyProcessed(String)
    /// The tenant has no (valid) provider credentials for this platform/topic.
    case noCredentials(String)
}

/// Sends pushes to APNs/FCM (or the local sandbox). Implementations are thread-safe and keep
/// their own connection pools and token caches; `send` blocks the calling worker thread,
/// `submit` need not (docs/delivery.md "Sending").
public protocol PushSender: Sendable {
    /// Sends one push and blocks until its result.
    func send(_ push: OutgoingPush) -> PushResult
    /// Sends one push and calls `completion` exactly once with its result. `written` is called
    /// at most once, when the first attempt's request has been written to the provider
    /// connection (used for the commit → request lag). An event-driven sender returns at once
    /// and calls both from its connection threads (keep them short); the default
    /// implementation calls `written`, then `send`, then `completion` on the caller's thread.
    func submit(_ push: OutgoingPush, written: (@Sendable () -> Void)?, completion: @escaping @Sendable (PushResult) -> Void)
    /// True when `submit` returns without waiting for the provider (the dispatcher then keeps
    /// many more pushes in flight than it has threads). Default false.
    var isEventDriven: Bool { get }
}

extension PushSender {
    public var isEventDriven: Bool { false }

    public func submit(_ push: OutgoingPush, written: (@Sendable () -> Void)?, completion: @escaping @Sendable (PushResult) -> Void) {
        written?()
        completion(send(push))
    }
}

/// Blocks until an asynchronous `submit`-style call completes (the blocking `send` of the
/// event-driven senders).
func waitForCompletion<T: Sendable>(_ start: (@escaping @Sendable (T) -> Void) -> Void) -> T {
    let done = DispatchSemaphore(value: 0)
    let box = Locked<T?>(nil)
    start { v in
        box.withLock { $0 = v }
        done.signal()
    }
    done.wait()
    return box.withLock { $0! }
}
