import Foundation
import XCTest
import Delivery

/// `SweepPacer` (docs/delivery.md "Maintenance cost"): a cheap scan runs every interval; a
/// costly one waits its duration divided by the share, so it never takes more than that share
/// of a core. Pure: no I/O, the clock is passed in.
final class SweepPacerTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func testDueAtOnceThenAfterTheIntervalWhenCheap() {
        var p = SweepPacer(intervalSeconds: 5, maxShare: 0.02)
        XCTAssertTrue(p.isDue(t0), "never ran: due")
        // 0.1 s / 0.02 = 5 s: exactly the interval, so the interval holds.
        XCTAssertEqual(p.ran(startedAt: t0, seconds: 0.1), 5, accuracy: 1e-9)
        XCTAssertFalse(p.isDue(t0.addingTimeInterval(4.999)))
        XCTAssertTrue(p.isDue(t0.addingTimeInterval(5)))
    }

    func testACostlyRunStretchesThePauseToItsShare() {
        var p = SweepPacer(intervalSeconds: 5, maxShare: 0.02)
        // 0.15 s (the gauge beside 100,000 queued) → 7.5 s; 1.5 s → 75 s.
        XCTAssertEqual(p.ran(startedAt: t0, seconds: 0.15), 7.5, accuracy: 1e-9)
        XCTAssertFalse(p.isDue(t0.addingTimeInterval(7.49)))
        XCTAssertTrue(p.isDue(t0.addingTimeInterval(7.5)))
        XCTAssertEqual(p.ran(startedAt: t0, seconds: 1.5), 75, accuracy: 1e-9)
        XCTAssertEqual(p.lastPauseSeconds, 75, accuracy: 1e-9)
        // Cheap again: back to the interval.
        XCTAssertEqual(p.ran(startedAt: t0, seconds: 0.001), 5, accuracy: 1e-9)
        XCTAssertTrue(p.isDue(t0.addingTimeInterval(5)))
    }

    func testOutOfRangeSettingsAreClamped() {
        var p = SweepPacer(intervalSeconds: -1, maxShare: 5)
        XCTAssertEqual(p.intervalSeconds, 0)
        XCTAssertEqual(p.maxShare, 1)
        XCTAssertEqual(p.ran(startedAt: t0, seconds: 2), 2, accuracy: 1e-9, "share 1: pause = duration")
        XCTAssertEqual(SweepPacer(intervalSeconds: 1, maxShare: 0).maxShare, 0.000_1, "a zero share cannot divide by zero")
    }
}
