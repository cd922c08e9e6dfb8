import Foundation
import LiveRelayTestSupport
import Locking
import XCTest

/// `Locked` (Sources/Locking): mutual exclusion, errors passing through, the value's lifetime.
/// `deploy/local/tsan` runs these under ThreadSanitizer too, where a report here would mean the
/// lock's happens-before edges are not seen.
final class LockedTests: XCTestCase {
    private struct Refused: Error, Equatable { let value: Int }
    private final class Tracked: @unchecked Sendable { var count = 0 }  // only under a `Locked`

    func testIncrementsFromManyThreadsAreNotLost() {
        let counter = Locked(0)
        _ = concurrently(8, threads: 4) { _ in
            for _ in 0..<5_000 { counter.withLock { $0 += 1 } }
        }
        XCTAssertEqual(counter.withLock { $0 }, 40_000)
    }

    func testAVoidLockGuardsStateOutsideIt() {
        // The shape of `Logger.lock`: the lock holds nothing, the guarded state lives elsewhere.
        let lock = Locked(())
        let state = Tracked()
        _ = concurrently(8, threads: 4) { _ in
            for _ in 0..<5_000 { lock.withLock { _ in state.count += 1 } }
        }
        XCTAssertEqual(lock.withLock { _ in state.count }, 40_000)
    }

    func testAThrownErrorPassesThroughKeepsEarlierChangesAndReleasesTheLock() {
        let value = Locked(1)
        XCTAssertThrowsError(
            try value.withLock { (v: inout Int) throws(Refused) in
                v = 2
                throw Refused(value: v)
            }
        ) { error in XCTAssertEqual(error as? Refused, Refused(value: 2)) }
        XCTAssertEqual(value.withLock { $0 }, 2, "the change before the throw stays; the lock is free again")
    }

    func testTheValueIsReleasedWithTheLock() {
        weak var weakValue: Tracked?
        do {
            let lock = Locked(Tracked())
            weakValue = lock.withLock { $0 }
            XCTAssertNotNil(weakValue)
        }
        XCTAssertNil(weakValue)
    }
}
