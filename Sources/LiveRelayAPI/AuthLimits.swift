import Dispatch
import Foundation
import Crypto

/// The bounds `Authenticator` puts on credential verification, so forged credentials cannot
/// buy argon2 runs without limit (docs/http-limits.md, "Credential verification").
///
/// None of them applies to a request whose credential is already in the verification cache:
/// that request is answered before any of these is consulted.
public struct AuthLimits: Sendable {
    /// Concurrent argon2id verifications and the bounded wait for a slot; full →
    /// `503 SERVICE_UNAVAILABLE` with `Retry-After`.
    public var argon2: Argon2idLimiter
    /// Seconds a failed verification is remembered (keyed by HMAC-SHA-256 of the token, never
    /// the token): the same token again is refused with 401 without a database read or argon2.
    public var failureCacheSeconds: Double
    /// Failed authentications one client address may make in a burst before it is answered
    /// `429 RATE_LIMITED` (a token bucket of this capacity).
    public var failuresPerAddress: Int
    /// Seconds for one failure of the burst to be allowed again (the bucket's refill period).
    public var failureRefillSeconds: Double
    /// Longest wait, in seconds, for another request's verification of the same credential
    /// (single flight); past it the waiter is answered `503 SERVICE_UNAVAILABLE`.
    public var singleFlightWaitSeconds: Double
    /// Most remembered failures and tracked addresses (bounded memory); past it expired and
    /// refilled entries are dropped, then the oldest half.
    public var maxTrackedEntries: Int

    /// Defaults: argon2 slots = cores − 1 (≥ 1) with a 0.25 s wait, failures remembered 30 s,
    /// 20 failures per address in a burst refilled one per 3 s (20 a minute), 5 s
    /// single-flight wait, 100,000 tracked entries.
    public init(
        argon2: Argon2idLimiter = Argon2idLimiter(), failureCacheSeconds: Double = 30, failuresPerAddress: Int = 20,
        failureRefillSeconds: Double = 3, singleFlightWaitSeconds: Double = 5, maxTrackedEntries: Int = 100_000
    ) {
        self.argon2 = argon2
        self.failureCacheSeconds = failureCacheSeconds
        self.failuresPerAddress = max(1, failuresPerAddress)
        self.failureRefillSeconds = max(0.001, failureRefillSeconds)
        self.singleFlightWaitSeconds = max(0, singleFlightWaitSeconds)
        self.maxTrackedEntries = max(16, maxTrackedEntries)
    }
}

extension AuthLimits {
    /// The failure bucket a client address counts against (docs/http-limits.md "Credential
    /// verification"): an IPv4 address is its own bucket; an IPv6 address shares one with its
    /// /64 (`2001:db8:1:2::/64`), the block a single host or subscriber is usually given, so
    /// rotating through one's own /64 buys no more failures; an IPv4-mapped IPv6 address
    /// (`::ffff:192.0.2.1`) is its IPv4 address. Anything else (no address, a unix socket) is
    /// returned as it is.
    public static func failureBucket(forAddress address: String) -> String {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return address }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return address }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            return bytes[12..<16].map(String.init).joined(separator: ".")
        }
        let groups = stride(from: 0, to: 8, by: 2).map { String((UInt16(bytes[$0]) << 8) | UInt16(bytes[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }
}

/// Failed-authentication bookkeeping: remembered failures (by token HMAC) and a token bucket
/// per client address. Pure in-memory logic with an injected time (`Date` arguments), so it is
/// unit-testable without I/O.
struct FailureTracker: Sendable {
    struct Bucket { var tokens: Double; var updated: Date }
    var failures: [String: Date] = [:]  // token HMAC → remembered until
    var buckets: [String: Bucket] = [:]  // client address → bucket
    let limits: AuthLimits

    init(limits: AuthLimits) { self.limits = limits }

    /// True when `key` failed within `failureCacheSeconds`.
    func remembersFailure(_ key: String, at now: Date) -> Bool {
        if let until = failures[key], until > now { return true }
        return false
    }

    /// Takes one unit of `address`'s bucket for a verification about to read the database:
    /// nil when taken, else the whole seconds (≥ 1) until one is available (nothing taken).
    mutating func reserve(address: String, at now: Date) -> Int? {
        if failures.count >= limits.maxTrackedEntries || buckets.count >= limits.maxTrackedEntries { prune(at: now) }
        let tokens = available(address, at: now)
        guard tokens >= 1 else { return max(1, Int(((1 - tokens) * limits.failureRefillSeconds).rounded(.up))) }
        buckets[address] = Bucket(tokens: tokens - 1, updated: now)
        return nil
    }

    /// Gives back the unit `reserve` took: the verification succeeded, or never ran (busy,
    /// database down), so it was no failed authentication.
    mutating func refund(address: String, at now: Date) {
        let capacity = Double(limits.failuresPerAddress)
        buckets[address] = Bucket(tokens: min(capacity, available(address, at: now) + 1), updated: now)
    }

    /// Remembers that the token with HMAC `key` failed (its unit stays taken).
    mutating func rememberFailure(key: String, at now: Date) {
        if failures.count >= limits.maxTrackedEntries { prune(at: now) }
        failures[key] = now.addingTimeInterval(limits.failureCacheSeconds)
    }

    private func available(_ address: String, at now: Date) -> Double {
        let capacity = Double(limits.failuresPerAddress)
        guard let b = buckets[address] else { return capacity }
        let refilled = max(0, now.timeIntervalSince(b.updated)) / limits.failureRefillSeconds
        return min(capacity, b.tokens + refilled)
    }

    private mutating func prune(at now: Date) {
        failures = failures.filter { $0.value > now }
        buckets = buckets.filter { available($0.key, at: now) < Double(limits.failuresPerAddress) }
        if failures.count >= limits.maxTrackedEntries / 2 {
            failures = Dictionary(
                uniqueKeysWithValues: failures.sorted { $0.value > $1.value }.prefix(limits.maxTrackedEntries / 2).map { ($0.key, $0.value) })
        }
        if buckets.count >= limits.maxTrackedEntries / 2 {
            buckets = Dictionary(
                uniqueKeysWithValues: buckets.sorted { $0.value.updated > $1.value.updated }.prefix(limits.maxTrackedEntries / 2).map {
                    ($0.key, $0.value)
                })
        }
    }
}

/// One in-progress verification of one credential (single flight): later requests for the
/// same token wait on it instead of running argon2 again, then re-read the caches.
final class VerificationFlight: Sendable {
    private let group = DispatchGroup()

    /// A flight in progress (its leader calls `finish` exactly once).
    init() { group.enter() }

    /// Called once by the leader, whatever the outcome: wakes every waiter.
    func finish() { group.leave() }

    /// Waits for the leader, at most `seconds`; false on timeout.
    func wait(seconds: Double) -> Bool { group.wait(timeout: .now() + seconds) == .success }
}
