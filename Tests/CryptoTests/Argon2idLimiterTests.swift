import Crypto
import Foundation
import XCTest

/// `Argon2idLimiter` (docs/http-limits.md "argon2 slots"): at most `maxConcurrent` runs, a
/// bounded wait, and waiters served round robin by key (the tenant).
final class Argon2idLimiterTests: XCTestCase {
    /// The admissions of the runs, in order (thread-safe).
    final class Order: @unchecked Sendable {  // guarded by `lock`
        private let lock = NSLock()
        private var keys: [String] = []
        func append(_ k: String) { lock.lock(); keys.append(k); lock.unlock() }
        var all: [String] { lock.lock(); defer { lock.unlock() }; return keys }
    }

    func waitFor(_ what: String, _ condition: () -> Bool) {
        let deadline = Date().addingTimeInterval(10)
        while !condition() && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        XCTAssertTrue(condition(), what)
    }

    /// One slot held; four callers of key `a` wait, then one of key `b`. When the slot frees,
    /// `a`'s oldest caller goes first (its key's turn came first), then `b`, ahead of `a`'s
    /// three others: one key's queue delays another key by one run, not by the whole queue.
    /// A plain first-come queue would admit `b` last.
    func testWaitersAreServedRoundRobinByKey() {
        let limiter = Argon2idLimiter(maxConcurrent: 1, maxWaitSeconds: 10)
        let order = Order()
        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? limiter.run(key: "a") {
                holding.signal(); release.wait()
            }
        }
        holding.wait()
        let done = DispatchGroup()
        for (i, key) in ["a", "a", "a", "a", "b"].enumerated() {
            done.enter()
            DispatchQueue.global().async {
                _ = try? limiter.run(key: key) {
                    order.append(key); Thread.sleep(forTimeInterval: 0.005)
                }
                done.leave()
            }
            waitFor("\(i + 1) waiting") { limiter.waitingCount == i + 1 }
        }
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.all, ["a", "b", "a", "a", "a"])
        XCTAssertEqual(limiter.totalRuns, 6)
        XCTAssertEqual(limiter.running, 0)
        XCTAssertEqual(limiter.waitingCount, 0)
    }

    /// Verifications go before issuance: three registrations of one tenant wait, then a
    /// verification of the same tenant arrives last and still gets the next free slot.
    func testVerificationsAreServedBeforeIssuance() {
        let limiter = Argon2idLimiter(maxConcurrent: 1, maxWaitSeconds: 10)
        let order = Order()
        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? limiter.run(key: "t", priority: .issuance) {
                holding.signal(); release.wait()
            }
        }
        holding.wait()
        let done = DispatchGroup()
        let callers: [(String, Argon2idLimiter.Priority)] = [
            ("mint1", .issuance), ("mint2", .issuance), ("mint3", .issuance), ("verify", .verification)
        ]
        for (i, (name, priority)) in callers.enumerated() {
            done.enter()
            DispatchQueue.global().async {
                _ = try? limiter.run(key: "t", priority: priority) {
                    order.append(name); Thread.sleep(forTimeInterval: 0.005)
                }
                done.leave()
            }
            waitFor("\(i + 1) waiting") { limiter.waitingCount == i + 1 }
        }
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.all, ["verify", "mint1", "mint2", "mint3"])
        XCTAssertEqual(limiter.running, 0)
        XCTAssertEqual(limiter.waitingCount, 0)
    }

    /// A waiter whose wait runs out is refused (`Busy`) and leaves the queue: the next release
    /// goes to a waiter that is still there, and the slot is not lost.
    func testAWaiterThatTimesOutLeavesTheQueue() throws {
        let limiter = Argon2idLimiter(maxConcurrent: 1, maxWaitSeconds: 0.05)
        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? limiter.run(key: "a") {
                holding.signal(); release.wait()
            }
        }
        holding.wait()
        XCTAssertThrowsError(try limiter.run(key: "b") {}) { XCTAssertEqual(($0 as? Argon2idLimiter.Busy)?.retryAfterSeconds, 1) }
        XCTAssertEqual(limiter.waitingCount, 0)
        release.signal()
        waitFor("the slot is free again") { limiter.running == 0 }
        XCTAssertEqual(try limiter.run(key: "b") { 7 }, 7)
    }
}
