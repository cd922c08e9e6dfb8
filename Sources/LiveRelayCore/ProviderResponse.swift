import Foundation
import JSON

/// What the dispatcher does with one provider response (docs/providers.md "Responses"), decided purely
/// from the HTTP status, the JSON error body and a few headers by `ProviderOutcome.apns(...)`
/// and `ProviderOutcome.fcm(...)`. Transport failures (connection lost, GOAWAY, refused
/// stream) are not responses: see `RetryPolicy.onInterruption`.
public enum ProviderOutcome: Sendable, Equatable {
    /// The provider accepted the push (operation `accepted`). `providerId` is APNs' `apns-id`
    /// (store it in `operation.apns_id`) or FCM's message `name`; nil when not given.
    case accepted(providerId: String?)
    /// The device token is dead (APNs 410 / 400 `BadDeviceToken`; FCM `UNREGISTERED`). The
    /// operation fails with `Code.tokenInvalid`; what happens to the target, start target or
    /// installation depends on the token: `ProviderOutcome.deadTokenEffect(_:)`.
    case tokenDead(providerStatus: Int, providerReason: String?)
    /// The provider credential expired (APNs 403 `ExpiredProviderToken`; FCM 401): mint a new
    /// JWT / access token and send again **once**; the response to that one retry is classified
    /// with `isRetryAfterRefresh: true`, which never yields this case again (no loop).
    case refreshCredentialAndRetryOnce
    /// APNs 403 `UnrelatedKeyIdInToken`: the HTTP/2 connection was first used with another
    /// signing key (a rotated APNs key on a pooled connection). The credential itself may be
    /// fine: close that connection, open a new one for this (team, key, environment) and send
    /// again **once** (answer classified with `isRetryAfterRefresh: true`).
    case reconnectAndRetryOnce
    /// Final failure: operation `failed` with `failure: {code, provider_status, provider_reason}`.
    case failed(code: String, providerStatus: Int, providerReason: String?)
    /// The provider did not process it (429, 5xx): resend after
    /// `RetryPolicy.delay(attempt:random:retryAfter:)`; `after` is the `Retry-After` header in
    /// seconds when the provider sent one (a floor for the delay).
    case retry(after: Double?)

    /// `failure.code` values of failed operations.
    public enum Code {
        /// Credential errors (APNs 403 except `ExpiredProviderToken`; FCM 403, a second 401).
        public static let credentialsInvalid = "PROVIDER_CREDENTIALS_INVALID"
        /// APNs 413 `PayloadTooLarge` (normally caught at commit, docs/write-semantics.md rule 8).
        public static let payloadTooLarge = "PAYLOAD_TOO_LARGE"
        /// Any other rejection (APNs 400 `BadTopic`, …; FCM 400 `INVALID_ARGUMENT`, …); the
        /// provider's reason is in `providerReason`.
        public static let rejected = "PROVIDER_REJECTED"
        /// The device token is dead (`tokenDead`).
        public static let tokenInvalid = "TOKEN_INVALID"
    }

    /// True for outcomes after which the operation is final (`accepted`, `failed`, `tokenDead`).
    public var isFinal: Bool {
        switch self {
        case .accepted, .failed, .tokenDead: return true
        case .refreshCredentialAndRetryOnce, .reconnectAndRetryOnce, .retry: return false
        }
    }

    /// The `Retry-After` header as seconds: delta-seconds only (`"120"`; surrounding spaces
    /// allowed). An HTTP-date or anything else gives nil (the policy's own backoff applies).
    public static func retryAfterSeconds(_ header: String?) -> Double? {
        guard let h = header?.trimmingCharacters(in: .whitespaces), !h.isEmpty, h.utf8.count <= 10,
            h.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let v = Int64(h)
        else { return nil }
        return Double(v)
    }
}

/// Which token a dead-token response was about.
public enum DeadTokenKind: Sendable, Equatable, CaseIterable {
    /// An iOS push-to-start token of a start target (a remote start).
    case pushToStart
    /// An iOS per-activity update token of a target (update or end).
    case activityUpdate
    /// An Android installation's FCM registration token.
    case fcmInstallation
}

/// What a dead token does to stored state (docs/providers.md "Responses"; the operation itself fails
/// with `ProviderOutcome.Code.tokenInvalid` in every case).
public enum DeadTokenEffect: Sendable, Equatable {
    /// The target → `ended` with this `end_reason` (`token_invalid`); its queued work is cancelled.
    case endTarget(endReason: String)
    /// The start target → `pending` until a new push-to-start token is registered.
    case startTargetPending
    /// The installation's FCM token is cleared: its Android start targets → `pending` and its
    /// live Android targets → `token_pending` until `PUT .../fcm-token` registers a new one
    /// (docs/providers.md: Android tokens are registered exactly while the installation has an FCM token).
    case clearInstallationFCMToken
}

extension ProviderOutcome {
    /// The effect of `tokenDead` for the kind of token the push used.
    public static func deadTokenEffect(_ kind: DeadTokenKind) -> DeadTokenEffect {
        switch kind {
        case .pushToStart: return .startTargetPending
        case .activityUpdate: return .endTarget(endReason: "token_invalid")
        case .fcmInstallation: return .clearInstallationFCMToken
        }
    }

    /// Parses a JSON object body; nil for an empty or non-JSON body.
    static func jsonObject(_ body: [UInt8]) -> JSONValue? {
        guard !body.isEmpty, let v = try? JSONValue.parse(body, maxDepth: 16), v.objectValue != nil else { return nil }
        return v
    }
}
