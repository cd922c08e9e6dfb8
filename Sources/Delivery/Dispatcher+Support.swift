import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Locking
import Synchronization

/// A value behind a lock (gauges sampled from other threads), read and replaced whole.
final class LockedValue<T: Sendable>: Sendable {
    private let locked: Locked<T>
    init(_ v: T) { locked = Locked(v) }
    func set(_ v: T) { locked.withLock { $0 = v } }
    func get() -> T { locked.withLock { $0 } }
}

/// Commit times of operations committed in this process (`Dispatcher.noteCommitted`), kept
/// until their first attempt is written; bounded (oldest half dropped beyond `limit`), so a
/// hint for an operation another worker sends costs only memory for a while.
final class CommitHints: Sendable {
    private let state = Locked<(times: [String: Date], order: [String])>(([:], []))
    let limit: Int
    init(limit: Int = 100_000) { self.limit = limit }

    func record(_ ids: [String], at: Date) {
        guard !ids.isEmpty else { return }
        state.withLock { s in
            for id in ids where s.times.updateValue(at, forKey: id) == nil { s.order.append(id) }
            if s.order.count > limit {
                let drop = s.order.count / 2
                for id in s.order.prefix(drop) { s.times[id] = nil }
                s.order.removeFirst(drop)
            }
        }
    }

    /// The commit time of `id`, forgotten once taken.
    func take(_ id: String) -> Date? { state.withLock { $0.times.removeValue(forKey: id) } }

    /// True while `id`'s commit time is recorded (not yet taken).
    func contains(_ id: String) -> Bool { state.withLock { $0.times[id] != nil } }
}

/// Totals of a dispatcher since start (`Dispatcher.stats`); durations in seconds.
public struct DispatcherStats: Sendable, Equatable {
    /// Claim transactions run (fair claims + named claims) and of those the named ones.
    public var claims = 0, namedClaims = 0
    /// Operations claimed by the writes that queued them (docs/delivery.md "Claims at commit").
    public var claimedAtCommit = 0
    /// Operations the fan-out expander inserted as `sending` (docs/delivery.md "Claims at fan-out").
    public var claimedAtFanout = 0
    /// Operations claimed, and by named claims.
    public var claimed = 0, namedClaimed = 0
    /// Summed duration of the claim transactions.
    public var claimSeconds = 0.0
    /// Apply transactions run, results they applied, their summed duration.
    public var applies = 0, applied = 0
    public var applySeconds = 0.0
    /// Operations of fair or named claims that took more than half a lease, returned to the
    /// queue instead of handed over (docs/delivery.md "Claims").
    public var returnedSlowClaims = 0
    /// Results whose apply failed and was tried again (docs/delivery.md "Applying results").
    public var applyRetries = 0
}

/// `DispatcherStats` behind a mutex.
final class DispatcherCounters: Sendable {
    private let state = Locked(DispatcherStats())
    func claimed(_ n: Int, seconds: Double, named: Bool) {
        state.withLock { s in
            s.claims += 1; s.claimed += n; s.claimSeconds += seconds
            if named { s.namedClaims += 1; s.namedClaimed += n }
        }
    }
    func claimedAtCommit(_ n: Int) { state.withLock { $0.claimedAtCommit += n } }
    func claimedAtFanout(_ n: Int) { state.withLock { $0.claimedAtFanout += n } }
    func returnedSlowClaim(_ n: Int) { state.withLock { $0.returnedSlowClaims += n } }
    func applyRetried(_ n: Int) { state.withLock { $0.applyRetries += n } }
    func applied(_ n: Int, seconds: Double) {
        state.withLock { s in
            s.applies += 1; s.applied += n; s.applySeconds += seconds
        }
    }
    func snapshot() -> DispatcherStats { state.withLock { $0 } }
}

/// Provider requests in flight and their high-water mark (lock-free counters).
final class InFlightCounter: Sendable {
    private let value = Atomic<Int>(0)
    private let high = Atomic<Int>(0)
    var now: Int { value.load(ordering: .relaxed) }
    var highWater: Int { high.load(ordering: .relaxed) }
    func increment() {
        let n = value.wrappingAdd(1, ordering: .relaxed).newValue
        var h = high.load(ordering: .relaxed)
        while n > h {
            let (exchanged, original) = high.compareExchange(expected: h, desired: n, ordering: .relaxed)
            if exchanged { break }
            h = original
        }
    }
    func decrement() { value.wrappingSubtract(1, ordering: .relaxed) }
}
