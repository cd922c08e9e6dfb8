import XCTest
@testable import LiveRelayCore

/// The per-day outcome series behind `GET /v1/remote-updates/usage/daily` (docs/console.md).
final class DailyOutcomesTests: XCTestCase {
    let now = Timestamp.parse("2026-12-01T00:30:00Z")!

    func testDatesEndTodayOldestFirstAcrossAMonthBoundary() {
        XCTAssertEqual(
            DailyOutcomes.dates(endingAt: now, days: 7),
            ["2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01"])
        XCTAssertEqual(DailyOutcomes.dates(endingAt: now, days: 1), ["2026-12-01"])
        XCTAssertEqual(DailyOutcomes.dates(endingAt: Timestamp.parse("2028-03-01T23:59:59.999Z")!, days: 2), ["2028-02-29", "2028-03-01"])
    }

    func testStartIsMidnightUTCOfTheFirstDay() {
        XCTAssertEqual(Timestamp.format(DailyOutcomes.start(endingAt: now, days: 7)), "2026-11-25T00:00:00.000Z")
        XCTAssertEqual(Timestamp.format(DailyOutcomes.start(endingAt: now, days: 1)), "2026-12-01T00:00:00.000Z")
    }

    func testZeroFillsEveryDayAndStatusAndIgnoresRowsOutsideTheSeries() {
        let series = DailyOutcomes(
            now: now, days: 3,
            counts: [
                ("2026-11-29", "accepted", 4), ("2026-11-29", "failed", 1), ("2026-12-01", "superseded", 2),
                ("2026-11-28", "accepted", 9),  // before the series
                ("2026-12-01", "bogus", 5)  // not a status
            ], quota: [("2026-11-29", 3), ("2026-11-29", 1), ("2026-11-20", 7)])
        XCTAssertEqual(series.days.map(\.day), ["2026-11-29", "2026-11-30", "2026-12-01"])
        XCTAssertEqual(series.days.map(\.total), [5, 0, 2])
        XCTAssertEqual(series.days.map(\.quotaUsed), [4, 0, 0])
        for d in series.days { XCTAssertEqual(Set(d.counts.keys), Set(OperationStatus.allCases)) }
        XCTAssertEqual(series.days[0].counts[.accepted], 4)
        XCTAssertEqual(series.days[0].counts[.failed], 1)
        XCTAssertEqual(series.days[2].counts[.superseded], 2)
        XCTAssertEqual(series.days[1].counts[.queued], 0)
    }

    func testDayRangeAndDefault() {
        XCTAssertEqual(DailyOutcomes.dayRange, 1...31)
        XCTAssertEqual(DailyOutcomes.defaultDays, 7)
    }

    func testLowerBoundSortsBeforeEveryIdMadeAtOrAfterItsInstant() {
        let at = Date(timeIntervalSince1970: 1_795_000_000.123)
        let bound = Identifier.lowerBound(.operation, at: at)
        XCTAssertTrue(Identifier.isValid(bound, kind: .operation), bound)
        for _ in 0..<200 {
            XCTAssertLessThanOrEqual(bound, Identifier.make(.operation, now: at))
            XCTAssertLessThan(bound, Identifier.make(.operation, now: at.addingTimeInterval(0.002)))
            XCTAssertGreaterThan(bound, Identifier.make(.operation, now: at.addingTimeInterval(-0.002)))
        }
    }
}
