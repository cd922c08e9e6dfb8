import Foundation

/// What came of one dispatch attempt, as the pure transition table sees it (the dispatcher
/// maps the provider client's `PushResult` onto this, and adds the cases that never reach a
/// provider: lease rescue, expiry, a payload that cannot be built).
public enum DispatchAttemptResult: Sendable, Equatable {
    /// The provider answered; classified by `ProviderOutcome.apns/.fcm`.
    case provider(ProviderOutcome)
    /// Provably not processed (GOAWAY above `last_stream_id`, refused stream, never written).
    case notProcessed(String)
    /// The request may have reached the provider (connection lost after sending, timeout).
    case possiblyProcessed(String)
    /// The tenant has no (valid) provider credentials for this platform/topic.
    case noCredentials(String)
    /// The worker that claimed the operation stopped renewing its lease mid-send (docs/write-semantics.md:
    /// "lease expired mid-send" is an unknown outcome).
    case leaseExpired
    /// The operation reached its `expires_at` before it could be sent.
    case expired
    /// The push could not be built (e.g. the payload grew over the provider limit).
    case notSendable(code: String, message: String)
}

/// The facts of an operation the transition table needs.
public struct DispatchOperationFacts: Sendable, Equatable {
    public var kind: PushEvent
    public var hasState: Bool
    public var hasAlert: Bool
    public var consumesQuota: Bool
    /// Attempts made so far, including the one whose result is being applied (≥ 1 after a claim).
    public var attempts: Int
    public var expiresAt: Date?
    /// `ios` or `android`.
    public var platform: String

    public init(kind: PushEvent, hasState: Bool, hasAlert: Bool, consumesQuota: Bool, attempts: Int, expiresAt: Date?, platform: String) {
        self.kind = kind; self.hasState = hasState; self.hasAlert = hasAlert; self.consumesQuota = consumesQuota
        self.attempts = attempts; self.expiresAt = expiresAt; self.platform = platform
    }
}

/// The state transitions one attempt result causes (docs/write-semantics.md "Ordering and coalescing",
/// "Outcome unknown", "Quota"; docs/providers.md "Responses"), decided purely by
/// `DispatchDecision.decide(_:_:now:random:policy:)` and applied by the store in one transaction.
///
/// | result | operation | quota | target | other |
/// | --- | --- | --- | --- | --- |
/// | accepted | `accepted` (+ `apns_id`) | consume | start → `token_pending` (iOS, `ready` if the update token is already registered) / `ready` (Android); end → `ended` (`sender`), queued rest cancelled | – |
/// | token dead | `failed` `TOKEN_INVALID` | release | update/end on iOS → `ended` (`token_invalid`), queued work cancelled; a start → `creation_failed`, queued work cancelled | push-to-start token: start target → `pending`, token cleared; FCM: installation token cleared, its Android start targets → `pending`, live Android targets → `token_pending` |
/// | failed / no credentials / not sendable | `failed` `{code, message, provider_status, provider_reason}` | release | start → `creation_failed`, queued work cancelled | – |
/// | retry (429/5xx), not processed | `queued`, `next_attempt_at` = now + `RetryPolicy.delay` (Retry-After floor) | – | – | past `expires_at` → `expired` instead |
/// | possibly processed, lease expired | state-only update or alert-less end: `queued` again with the same APNs timestamp; start or alert: `unknown`, never resent | unknown: consume (it may have been delivered) | unknown start → `start_unknown` | – |
/// | expired | `expired` | release | start → `creation_failed`, queued work cancelled | – |
public struct DispatchDecision: Sendable, Equatable {
    /// `failure` of a failed operation.
    public struct Failure: Sendable, Equatable {
        public var code: String
        public var message: String
        public var providerStatus: Int?
        public var providerReason: String?
        public init(code: String, message: String, providerStatus: Int? = nil, providerReason: String? = nil) {
            self.code = code; self.message = message; self.providerStatus = providerStatus; self.providerReason = providerReason
        }
    }

    /// What happens to the operation.
    public enum OperationChange: Sendable, Equatable {
        case accepted(providerId: String?)
        case failed(Failure)
        /// Back to `queued`, due after `delaySeconds`; the APNs timestamp already assigned is kept.
        /// `reason` (`provider_retry`, `not_processed`, `outcome_unknown`) becomes `pending_reason`.
        case requeue(delaySeconds: Double, reason: String)
        /// `unknown`: the provider may or may not have it; never resent. `reason` is stored as
        /// `failure: {code: "OUTCOME_UNKNOWN", message: reason}`.
        case unknown(reason: String)
        case expired

        public var status: OperationStatus {
            switch self {
            case .accepted: return .accepted
            case .failed: return .failed
            case .requeue: return .queued
            case .unknown: return .unknown
            case .expired: return .expired
            }
        }
    }

    /// The daily quota unit the operation reserved at commit.
    public enum QuotaChange: Sendable, Equatable { case none, consume, release }

    /// What happens to the operation's target (the store never moves a terminal target).
    public enum TargetChange: Sendable, Equatable {
        case none
        /// A start was accepted: iOS → `token_pending` (or `ready` when the update token is
        /// already registered); Android → `ready`. Only from `starting`.
        case startAccepted
        /// → `ended` with this `end_reason`.
        case ended(reason: String)
        /// → `creation_failed` (a start that will never create an activity).
        case creationFailed
        /// → `start_unknown` (only from `starting`).
        case startUnknown
    }

    public var operation: OperationChange
    public var quota: QuotaChange
    public var target: TargetChange
    /// Cancel the target's queued operations with this `pending_reason` (after the target change).
    public var cancelQueued: String?
    /// What a dead token does to stored tokens (docs/providers.md), when the result was a dead token.
    public var deadToken: DeadTokenEffect?

    public init(
        operation: OperationChange, quota: QuotaChange, target: TargetChange = .none, cancelQueued: String? = nil,
        deadToken: DeadTokenEffect? = nil
    ) {
        self.operation = operation; self.quota = quota; self.target = target; self.cancelQueued = cancelQueued; self.deadToken = deadToken
    }

    /// True when the operation leaves `queued`/`sending` for good.
    public var isFinal: Bool { operation.status.isFinal }

    /// `failure.code` when a push could not be sent because the tenant has no usable credentials.
    public static let noCredentialsCode = ProviderOutcome.Code.credentialsInvalid

    /// Which token a push of this operation used.
    public static func tokenKind(_ f: DispatchOperationFacts) -> DeadTokenKind {
        if f.platform == "android" { return .fcmInstallation }
        return f.kind == .start ? .pushToStart : .activityUpdate
    }

    /// The transition table (see the type documentation).
    /// - Parameters:
    ///   - now: the time the result is applied.
    ///   - random: uniform in 0..<1, the jitter of `RetryPolicy.delay`.
    public static func decide(
        _ f: DispatchOperationFacts, _ result: DispatchAttemptResult, now: Date, random: Double,
        policy: RetryPolicy = .standard
    ) -> DispatchDecision {
        let quotaRelease: QuotaChange = f.consumesQuota ? .release : .none
        let quotaConsume: QuotaChange = f.consumesQuota ? .consume : .none

        func fail(_ failure: Failure) -> DispatchDecision {
            if f.kind == .start {
                return DispatchDecision(operation: .failed(failure), quota: quotaRelease, target: .creationFailed, cancelQueued: "creation_failed")
            }
            return DispatchDecision(operation: .failed(failure), quota: quotaRelease)
        }
        func expired() -> DispatchDecision {
            if f.kind == .start {
                return DispatchDecision(operation: .expired, quota: quotaRelease, target: .creationFailed, cancelQueued: "creation_failed")
            }
            return DispatchDecision(operation: .expired, quota: quotaRelease)
        }
        func retry(after: Double?, reason: String) -> DispatchDecision {
            let delay = policy.delay(attempt: max(1, f.attempts), random: random, retryAfter: after)
            if let e = f.expiresAt, now.addingTimeInterval(delay) >= e { return expired() }
            return DispatchDecision(operation: .requeue(delaySeconds: delay, reason: reason), quota: .none)
        }
        func unknownOutcome(_ reason: String) -> DispatchDecision {
            switch RetryPolicy.onUnknownOutcome(kind: f.kind, hasState: f.hasState, hasAlert: f.hasAlert) {
            case .resend:
                return retry(after: nil, reason: "outcome_unknown")
            case .markUnknown:
                return DispatchDecision(
                    operation: .unknown(reason: reason), quota: quotaConsume,
                    target: f.kind == .start ? .startUnknown : .none)
            }
        }

        if case .expired = result { return expired() }
        if let e = f.expiresAt, e <= now {
            // Past expires_at: whatever a not-processed attempt says, nothing more is sent.
            switch result {
            case .notProcessed, .provider(.retry), .provider(.refreshCredentialAndRetryOnce), .provider(.reconnectAndRetryOnce):
                return expired()
            default: break
            }
        }

        switch result {
        case .provider(.accepted(let providerId)):
            switch f.kind {
            case .start: return DispatchDecision(operation: .accepted(providerId: providerId), quota: quotaConsume, target: .startAccepted)
            case .update: return DispatchDecision(operation: .accepted(providerId: providerId), quota: quotaConsume)
            case .end:
                return DispatchDecision(
                    operation: .accepted(providerId: providerId), quota: quotaConsume, target: .ended(reason: "sender"),
                    cancelQueued: "already_ended")
            }
        case .provider(.tokenDead(let status, let reason)):
            let kind = tokenKind(f)
            let effect = ProviderOutcome.deadTokenEffect(kind)
            let failure = Failure(
                code: ProviderOutcome.Code.tokenInvalid,
                message: kind == .pushToStart
                    ? "the push-to-start token is no longer valid"
                    : kind == .fcmInstallation
                        ? "the installation's FCM token is no longer valid"
                        : "the activity's push token is no longer valid",
                providerStatus: status, providerReason: reason)
            var d = DispatchDecision(operation: .failed(failure), quota: quotaRelease, deadToken: effect)
            if f.kind == .start {
                d.target = .creationFailed; d.cancelQueued = "creation_failed"
            } else if case .endTarget(let endReason) = effect {
                d.target = .ended(reason: endReason); d.cancelQueued = endReason
            }
            return d
        case .provider(.failed(let code, let status, let reason)):
            let message: String
            switch code {
            case ProviderOutcome.Code.credentialsInvalid: message = "the provider rejected the tenant's credentials"
            case ProviderOutcome.Code.payloadTooLarge: message = "the provider rejected the payload as too large"
            default: message = "the provider rejected the push"
            }
            return fail(Failure(code: code, message: message + (reason.map { " (\($0))" } ?? ""), providerStatus: status, providerReason: reason))
        case .provider(.retry(let after)):
            return retry(after: after, reason: "provider_retry")
        case .provider(.refreshCredentialAndRetryOnce), .provider(.reconnectAndRetryOnce):
            // The sender retries these itself; one that still surfaces was not processed.
            return retry(after: nil, reason: "provider_retry")
        case .notProcessed:
            return retry(after: nil, reason: "not_processed")
        case .possiblyProcessed(let why):
            return unknownOutcome(why.isEmpty ? "the request may have reached the provider" : why)
        case .leaseExpired:
            return unknownOutcome("the worker's lease expired mid-send")
        case .noCredentials(let why):
            return fail(Failure(code: noCredentialsCode, message: "no usable provider credentials: \(why)"))
        case .notSendable(let code, let message):
            return fail(Failure(code: code, message: message))
        case .expired:
            return expired()
        }
    }
}
