import Foundation

/// Capped exponential backoff with full jitter for resending pushes the provider did not
/// process (docs/write-semantics.md "Ordering and coalescing": GOAWAY above `last_stream_id`, refused stream,
/// `429`, `5xx`) and idempotent resends after an unknown outcome.
///
/// Delay before retry number `attempt` (1 = first retry), in **seconds**:
/// `ceiling = min(cap, base × factor^(attempt−1))`, `delay = random × ceiling` with `random`
/// uniform in 0..<1 (injected, so the function is pure), then `max(delay, retryAfter)` when
/// the provider sent `Retry-After`. Defaults: base 1 s, factor 2, cap 300 s, so ceilings run
/// 1, 2, 4, … 256, 300, 300 … s. The jittered part never exceeds `cap`; a `Retry-After` above
/// `cap` is honoured as sent (the provider's word wins). Retries stop when the operation
/// reaches its `expires_at` (operation `expired`), not after a fixed count.
///
/// Source: docs/write-semantics.md; AWS Architecture Blog "Exponential Backoff And Jitter" (full jitter).
public struct RetryPolicy: Sendable, Equatable {
    /// Ceiling of the first retry, seconds (> 0).
    public var base: Double
    /// Growth of the ceiling per attempt (≥ 1).
    public var factor: Double
    /// Largest ceiling, seconds.
    public var cap: Double

    public init(base: Double = 1, factor: Double = 2, cap: Double = 300) {
        self.base = base
        self.factor = factor
        self.cap = cap
    }

    /// base 1 s, factor 2, cap 300 s.
    public static let standard = RetryPolicy()

    /// The jitter ceiling for retry number `attempt` (≤ 1 counts as 1), seconds, ≤ `cap`.
    public func ceiling(attempt: Int) -> Double {
        let n = Double(max(1, attempt) - 1)
        let c = base * pow(factor, n)
        return c.isFinite ? min(cap, max(0, c)) : cap
    }

    /// Delay in seconds before retry number `attempt` (1-based).
    /// - Parameters:
    ///   - random: uniform in 0..<1 (clamped into it; NaN counts as 0).
    ///   - retryAfter: the provider's `Retry-After` in seconds, a floor for the result
    ///     (negative or non-finite values are ignored).
    /// - Returns: ≥ 0; ≤ `cap` unless `retryAfter` is larger.
    public func delay(attempt: Int, random: Double, retryAfter: Double? = nil) -> Double {
        let r = random.isNaN ? 0 : min(max(random, 0), 1.0.nextDown)
        let d = r * ceiling(attempt: attempt)
        if let ra = retryAfter, ra.isFinite, ra > d { return ra }
        return d
    }
}

/// What the dispatcher does with an operation whose send was interrupted.
public enum UnknownOutcomeAction: Sendable, Equatable {
    /// Send it again (same payload, same APNs `timestamp`, so a duplicate is harmless), after
    /// `RetryPolicy.delay`.
    case resend
    /// Operation → `unknown`; never resent automatically (docs/write-semantics.md). A start target → target
    /// `start_unknown`.
    case markUnknown
}

/// How a send attempt was interrupted (no usable provider response).
public enum SendInterruption: Sendable, Equatable, CaseIterable {
    /// The request may have reached the provider: connection lost after sending, lease
    /// expired mid-send, stream reset after the request was written.
    case outcomeUnknown
    /// The provider provably did not process it: HTTP/2 GOAWAY whose `last_stream_id` is below
    /// the stream, REFUSED_STREAM, or never written to the socket. (429/5xx responses are
    /// classified by `ProviderOutcome` as `.retry`, which is the same decision.)
    case notProcessed
}

extension RetryPolicy {
    /// docs/write-semantics.md "Outcome unknown": may an operation whose send may have reached the provider be
    /// resent?
    ///
    /// | kind | state | alert | action |
    /// | --- | --- | --- | --- |
    /// | start | any | any | `markUnknown` (a duplicate start would create a second activity) |
    /// | update | yes | no | `resend` (state-only: idempotent by timestamp) |
    /// | update | any | yes | `markUnknown` (alerts are never resent) |
    /// | end | no | no | `resend` (stateless cleanup) |
    /// | end | yes | no | `resend` — decision: a final state without alert is a state-only push; the resend carries the same timestamp, so the device applies it at most once |
    /// | end | any | yes | `markUnknown` (the contract's (docs/) end has no alert; kept for safety) |
    ///
    /// `kind` is the operation kind (`PushEvent` doubles as `operation.kind`).
    public static func onUnknownOutcome(kind: PushEvent, hasState: Bool, hasAlert: Bool) -> UnknownOutcomeAction {
        if kind == .start || hasAlert { return .markUnknown }
        return .resend
    }

    /// Both interruption kinds: `notProcessed` → `resend` (with backoff) for every kind,
    /// `outcomeUnknown` → `onUnknownOutcome(kind:hasState:hasAlert:)`.
    public static func onInterruption(
        _ interruption: SendInterruption, kind: PushEvent, hasState: Bool,
        hasAlert: Bool
    ) -> UnknownOutcomeAction {
        switch interruption {
        case .notProcessed: return .resend
        case .outcomeUnknown: return onUnknownOutcome(kind: kind, hasState: hasState, hasAlert: hasAlert)
        }
    }
}
