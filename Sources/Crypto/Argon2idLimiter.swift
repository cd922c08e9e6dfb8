import Foundation

/// A bound on concurrent argon2id runs (docs/http-limits.md, "argon2 concurrency").
///
/// One verification at the standard parameters holds 19 MiB and one core for ~20–60 ms, so an
/// unbounded number of them (one per forged credential) exhausts memory and starves every
/// other request of CPU. `run` admits at most `maxConcurrent` bodies at a time; a caller that
/// finds every slot taken waits at most `maxWaitSeconds` (seconds) for one, and is then refused with `Argon2idLimiter.Busy` instead of queueing without bound.
///
/// Thread-safe; blocking (callers run on worker threads).
/// `@unchecked Sendable`: the only mutable state, the two counters, is read and written under `condition`.
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
    /// Guards `runningCount` and `admittedCount`.
    private let condition = NSCondition()
    nonisolated(unsafe) private var runningCount = 0
    nonisolated(unsafe) private var admittedCount = 0

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

    /// Runs `body` in a slot.
    /// - Throws: `Busy` when every slot stayed taken for `maxWaitSeconds`; whatever `body` throws.
    public func run<T>(_ body: () throws -> T) throws -> T {
        try acquire()
        defer { release() }
        return try body()
    }

    private func acquire() throws(Busy) {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(maxWaitSeconds)
        while runningCount >= maxConcurrent {
            if !condition.wait(until: deadline), runningCount >= maxConcurrent { throw Busy(retryAfterSeconds: 1) }
        }
        runningCount += 1
        admittedCount += 1
    }

    private func release() {
        condition.lock()
        runningCount -= 1
        condition.signal()
        condition.unlock()
    }
}
