import XCTest

@testable import LiveRelayStore

/// `QuotaHints` without I/O: a reading stands in for a read only while it is young and far
/// from the limit (docs/write-path.md "The quota read only near the limit").
final class QuotaHintsTests: XCTestCase {
    let second: UInt64 = 1_000_000_000

    func testAReadingStandsInOnlyWhileYoungerThanItsMaxAge() {
        let hints = QuotaHints()
        let t0: UInt64 = 50 * second
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "2026-12-05", now: t0), "nothing recorded")
        hints.record(tenantId: "ten_a", day: "2026-12-05", (limit: 10_000, reserved: 5, used: 7), takenAt: t0)
        let r = hints.far(tenantId: "ten_a", day: "2026-12-05", now: t0 + second - 1)
        XCTAssertEqual(r?.limit, 10_000)
        XCTAssertEqual(r?.reserved, 5)
        XCTAssertEqual(r?.used, 7)
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "2026-12-05", now: t0 + second), "one second old: read again")
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "2026-12-06", now: t0), "another day")
        XCTAssertNil(hints.far(tenantId: "ten_b", day: "2026-12-05", now: t0), "another tenant")
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "2026-12-05", now: t0 - 1), "a clock before the reading")
    }

    func testOnlyAReadingFarFromTheLimitStandsIn() {
        // Far: reserved + used + 2 × 64 shards ≤ limit / 2.
        XCTAssertTrue(QuotaStore.farFromLimit(limit: 1000, reserved: 300, used: 72))
        XCTAssertFalse(QuotaStore.farFromLimit(limit: 1000, reserved: 300, used: 73))
        XCTAssertFalse(QuotaStore.farFromLimit(limit: 255, reserved: 0, used: 0), "a limit below 256 is never far")
        XCTAssertTrue(QuotaStore.farFromLimit(limit: 256, reserved: 0, used: 0))
        let hints = QuotaHints()
        hints.record(tenantId: "ten_a", day: "d", (limit: 1000, reserved: 300, used: 73), takenAt: second)
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "d", now: second))
        hints.record(tenantId: "ten_a", day: "d", (limit: 1000, reserved: 300, used: 72), takenAt: second)
        XCTAssertNotNil(hints.far(tenantId: "ten_a", day: "d", now: second))
    }

    func testForgetDropsOneTenantAndStaleReadingsArePruned() {
        let hints = QuotaHints()
        hints.record(tenantId: "ten_a", day: "d1", (limit: 10_000, reserved: 0, used: 0), takenAt: second)
        hints.record(tenantId: "ten_a", day: "d2", (limit: 10_000, reserved: 0, used: 0), takenAt: second)
        hints.record(tenantId: "ten_ab", day: "d1", (limit: 10_000, reserved: 0, used: 0), takenAt: second)
        hints.forget(tenantId: "ten_a")
        XCTAssertNil(hints.far(tenantId: "ten_a", day: "d1", now: second))
        XCTAssertNotNil(hints.far(tenantId: "ten_ab", day: "d1", now: second), "a tenant id that merely starts the same stays")
        for i in 0..<QuotaHints.pruneAbove { hints.record(tenantId: "ten_\(i)", day: "d", (limit: 10_000, reserved: 0, used: 0), takenAt: second) }
        XCTAssertEqual(hints.count, QuotaHints.pruneAbove + 1)
        hints.record(tenantId: "ten_new", day: "d", (limit: 10_000, reserved: 0, used: 0), takenAt: 3 * second)
        XCTAssertEqual(hints.count, 1, "past the bound, readings older than the max age are dropped")
        // At most one pass per max age: young readings past the bound stay until the next one.
        for i in 0..<QuotaHints.pruneAbove {
            hints.record(tenantId: "ten_y\(i)", day: "d", (limit: 10_000, reserved: 0, used: 0), takenAt: 3 * second + 1)
        }
        XCTAssertEqual(hints.count, QuotaHints.pruneAbove + 1, "no second pass within the max age")
    }

    func testAnOlderReadingNeverReplacesANewerOne() {
        let hints = QuotaHints()
        hints.record(tenantId: "ten_a", day: "d", (limit: 10_000, reserved: 9, used: 0), takenAt: 5 * second)
        hints.record(tenantId: "ten_a", day: "d", (limit: 10_000, reserved: 1, used: 0), takenAt: 4 * second)
        XCTAssertEqual(hints.far(tenantId: "ten_a", day: "d", now: 5 * second)?.reserved, 9)
        hints.record(tenantId: "ten_a", day: "d", (limit: 10_000, reserved: 2, used: 0), takenAt: 6 * second)
        XCTAssertEqual(hints.far(tenantId: "ten_a", day: "d", now: 6 * second)?.reserved, 2)
    }
}
