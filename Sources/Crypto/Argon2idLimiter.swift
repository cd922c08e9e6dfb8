import Foundation

/// A bound on concurrent argon2id runs (docs/http-limits.md, "argon2 concurrency").
///
/// One verification at the standard parameters holds 19 MiB and one core for ~20–60 ms, so an
/// unbounded number of them (one per forged credential) exhausts memory and starves every
/// other request of CPU. `run` admits at most `maxConcurrent` bodies at a time; a caller that
/// finds every slot taken waits at most `maxWaitSeconds` (seconds) for one, and is then refused with `Argon2idLimiter.Busy` instead of queueing without bound.
/// Waiters are served round robin by `key` (the tenant), so one tenant's flood of new
/// credentials or registrations cannot keep another tenant's caller from the next free slot.
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
    /// Guards every counter and queue below.
    private let condition = NSCondition()
    nonisolated(unsafe) private var runningCount = 0
    nonisolated(unsafe) private var admittedCount = 0
    /// Waiting callers: tickets in arrival order per key, and the keys with waiters in the order
    /// their turns come (round robin); a ticket in `granted` was handed a slot by a release.
    nonisolated(unsafe) private var waiting: [String: [Int]] = [:]
    nonisolated(unsafe) private var turns: [String] = []
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
        return waiting.values.reduce(0) { $0 + $1.count }
    }

    /// Runs `body` in a slot. `key` (a tenant id, for example) shares the slots fairly among
    /// callers that must wait: a freed slot goes to the keys with waiters in turn (each key's
    /// oldest waiter first), so one key's many waiters delay another key's caller by at most one
    /// run per key ahead of it, not by its whole queue. nil: one shared key.
    /// - Throws: `Busy` when no slot came within `maxWaitSeconds`; whatever `body` throws.
    public func run<T>(key: String? = nil, _ body: () throws -> T) throws -> T {
        try acquire(key: key ?? "")
        defer { release() }
        return try body()
    }

    private func acquire(key: String) throws(Busy) {
        condition.lock()
        defer { condition.unlock() }
        if runningCount < maxConcurrent && turns.isEmpty {
            runningCount += 1
            admittedCount += 1
            return
        }
        let ticket = nextTicket
        nextTicket += 1
        if waiting[key, default: []].isEmpty { turns.append(key) }
        waiting[key, default: []].append(ticket)
        let deadline = Date().addingTimeInterval(maxWaitSeconds)
        while !granted.contains(ticket) {
            if !condition.wait(until: deadline) && !granted.contains(ticket) {
                waiting[key]?.removeAll { $0 == ticket }
                if waiting[key]?.isEmpty == true {
                    waiting[key] = nil
                    turns.removeAll { $0 == key }
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
        guard !turns.isEmpty else {
            runningCount -= 1
            return
        }
        let key = turns.removeFirst()
        let ticket = waiting[key]!.removeFirst()
        if waiting[key]!.isEmpty { waiting[key] = nil } else { turns.append(key) }
        granted.insert(ticket)
        condition.broadcast()
    }
}
