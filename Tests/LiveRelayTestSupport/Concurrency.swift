import Foundation
import Locking
import Synchronization

extension Locked {
    /// A copy of the value now (tests read results this way once the threads are done).
    public var current: Value { withLock { $0 } }
}

/// Lines written from any thread (a log sink, a child process's output), read by the test.
public final class LineCapture: Sendable {
    private let stored = Locked<[String]>([])
    public init() {}

    /// Appends one line.
    public func append(_ line: String) { stored.withLock { $0.append(line) } }

    /// A sink for `Logger(sink:)` or `HTTPServer(log:)` that appends every line here.
    public var write: @Sendable (String) -> Void { { [self] line in append(line) } }

    /// Every line so far, in order.
    public var lines: [String] { stored.withLock { $0 } }

    /// Every line so far, joined by newlines.
    public var text: String { stored.withLock { $0.joined(separator: "\n") } }
}

/// Runs `count` calls of `body` on `threads` real threads at once (Dispatch's pool on Linux is
/// capped at the CPU count) and returns the results by index.
public func concurrently<T: Sendable>(_ count: Int, threads: Int, _ body: @Sendable @escaping (Int) -> T) -> [T] {
    let results = Locked<[Int: T]>([:])
    let next = Atomic<Int>(0)
    let group = DispatchGroup()
    for _ in 0..<threads {
        group.enter()
        Thread {
            while true {
                let i = next.wrappingAdd(1, ordering: .relaxed).oldValue
                if i >= count { break }
                let value = body(i)
                results.withLock { $0[i] = value }
            }
            group.leave()
        }.start()
    }
    group.wait()
    return results.withLock { dict in (0..<count).map { dict[$0]! } }
}

/// A deterministic pseudo-random generator (SplitMix64, Steele, Lea and Flood, "Fast splittable
/// pseudorandom number generators", 2014) for seeded, reproducible property tests.
public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
