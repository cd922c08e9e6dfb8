import Foundation

/// A bound on concurrent argon2id runs (docs/http-limits.md, "argon2 concurrency").
///
/// One verification at the standard parameters holds 19 MiB and one core for ~20–60 ms, so an
/// unbounded number of them (one per forged credential) exhausts memory and starves every
/// other request of CPU. `run` admits at most `maxConcurrent` bodies at a time; a caller that
/// finds every slot taken waits at most `maxWaitSeconds` (seconds) for one, and is then refused with `Argon2idLimiter.Busy` instead of queueing without bound.
/// Waiters are served round robin by `key` (the tenant), so one tenant's flood of new
/// credentials or registrations cannot keep another tenant's caller from the next free slot.
/// Waiters of `Priority.verification` (an existing credential whose cache entry expired: the
/// tenant's own servers) always go before waiters of `Priority.issuance` (registrations,
/// renewals, key creation: reachable with a publishable key, which anyone with the app holds),
/// so a flood of registrations cannot starve verifications either.
///
/// Thread-safe; blocking (callers run on worker threads).
/// `@unchecked Sendable`: all mutable state (counters, queues) is read and written under `condition`.
public final class Argon2idLimiter: @unchecked Sendable {
    /// Thrown by `run` when no slot freed within `maxWaitSeconds`.
    public struct Busy: Error, Sendable, Equatable {
        /// Suggested seconds before retrying (whole seconds, at least 1): a `Retry-After` value.
        public let retryAfterSeconds: Int
    }

    /// Concurrent runs admitted (≥ 1).
    public let maxConcurrent: Int
    /// Longest wait for a slot, in seconds (0 = refuse at once when full).
    public let maxWaitSeconds: Double
    /// Which waiters go first when a slot frees.
    public enum Priority: Int, Sendable, CaseIterable {
        /// Verifying a presented credential (served first).
        case verification = 0
        /// Minting a new credential: registration, renewal, key creation (served when no
        /// verification waits).
        case issuance = 1
    }

    /// Waiting callers of one priority: tickets in arrival order per key, and the keys with
    /// waiters in the order their turns come (round robin).
    private struct Queue {
        var waiting: [String: [Int]] = [:]
        var turns: [String] = []
    }

    /// Guards every counter and queue below.
    private let condition = NSCondition()
    nonisolated(unsafe) private var runningCount = 0
    nonisolated(unsafe) private var admittedCount = 0
    /// One queue per `Priority` (by raw value); a ticket in `granted` was handed a slot by a release.
    nonisolated(unsafe) private var queues = [Queue](repeating: Queue(), count: Priority.allCases.count)
    nonisolated(unsafe) private var granted: Set<Int> = []
    nonisolated(unsafe) private var nextTicket = 0

    /// The default bound: one less than the active core count (at least 1), so argon2 alone can
    /// never take every core away from requests whose credential is already cached.
    public static var defaultConcurrency: Int { max(1, ProcessInfo.processInfo.activeProcessorCount - 1) }

    /// - Parameters:
    ///   - maxConcurrent: slots (clamped to ≥ 1); default `defaultConcurrency`.
    ///   - maxWaitSeconds: bounded wait for a slot, in seconds (clamped to ≥ 0); default 0.25.
    public init(maxConcurrent: Int = Argon2idLimiter.defaultConcurrency, maxWaitSeconds: Double = 0.25) {
        self.maxConcurrent = max(1, maxConcurrent)
        self.maxWaitSeconds = max(0, maxWaitSeconds)
    }

    /// Runs currently holding a slot (for tests and metrics).
    public var running: Int {
        condition.lock()
        defer { condition.unlock() }
        return runningCount
    }

    /// Runs admitted so far (for tests and metrics).
    public var totalRuns: Int {
        condition.lock()
        defer { condition.unlock() }
        return admittedCount
    }

    /// Callers waiting for a slot (for tests and metrics).
    public var waitingCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return queues.reduce(0) { total, q in total + q.waiting.values.reduce(0) { $0 + $1.count } }
    }

    /// Runs `body` in a slot. `key` (a tenant id, for example) shares the slots fairly among
    /// callers of one `priority` that must wait: a freed slot goes to the keys with waiters in
    /// turn (each key's oldest waiter first), so one key's many waiters delay another key's
    /// caller by at most one run per key ahead of it, not by its whole queue. nil: one shared
    /// key. A freed slot goes to a `.verification` waiter whenever one waits.
    /// - Throws: `Busy` when no slot came within `maxWaitSeconds`; whatever `body` throws.
    public func run<T>(key: String? = nil, priority: Priority = .verification, _ body: () throws -> T) throws -> T {
        try acquire(key: key ?? "", priority: priority.rawValue)
        defer { release() }
        return try body()
    }

    private func acquire(key: String, priority p: Int) throws(Busy) {
        condition.lock()
        defer { condition.unlock() }
        if runningCount < maxConcurrent && queues.allSatisfy({ $0.turns.isEmpty }) {
            runningCount += 1
            admittedCount += 1
            return
        }
        let ticket = nextTicket
        nextTicket += 1
        if queues[p].waiting[key, default: []].isEmpty { queues[p].turns.append(key) }
        queues[p].waiting[key, default: []].append(ticket)
        let deadline = Date().addingTimeInterval(maxWaitSeconds)
        while !granted.contains(ticket) {
            if !condition.wait(until: deadline) && !granted.contains(ticket) {
                queues[p].waiting[key]?.removeAll { $0 == ticket }
                if queues[p].waiting[key]?.isEmpty == true {
                    queues[p].waiting[key] = nil
                    queues[p].turns.removeAll { $0 == key }
                }
                throw Busy(retryAfterSeconds: 1)
            }
        }
        granted.remove(ticket)  // the releaser kept `runningCount` for this caller
        admittedCount += 1
    }

    private func release() {
        condition.lock()
        defer { condition.unlock() }
        guard let p = queues.firstIndex(where: { !$0.turns.isEmpty }) else {
            runningCount -= 1
            return
        }
        let key = queues[p].turns.removeFirst()
        let ticket = queues[p].waiting[key]!.removeFirst()
        if queues[p].waiting[key]!.isEmpty { queues[p].waiting[key] = nil } else { queues[p].turns.append(key) }
        granted.insert(ticket)
        condition.broadcast()
    }
}
