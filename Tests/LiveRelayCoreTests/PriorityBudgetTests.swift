import XCTest
@testable import LiveRelayCore

/// `PriorityBudget` (docs/priority-budget.md): the decision table row by row, the sliding
/// window at its exact edges, and the bounded window update. No I/O.
final class PriorityBudgetTests: XCTestCase {
    func decide(
        _ sends: Int, budget: Int = 3, _ kind: PushEvent = .update, alert: Bool = false, platform: String = "ios",
        requested: Int = 10
    ) -> PriorityBudget.Decision {
        PriorityBudget.decide(sendsInWindow: sends, budget: budget, kind: kind, hasAlert: alert, platform: platform, requestedPriority: requested)
    }

    func testStateOnlyUpdatesGoAtTenUntilTheBudgetThenAtFive() {
        for n in 0..<3 {
            XCTAssertEqual(decide(n), .init(priority: 10, requestedPriority: 10, downgraded: false, counts: true), "send \(n + 1) of 3")
        }
        XCTAssertEqual(decide(3), .init(priority: 5, requestedPriority: 10, downgraded: true, counts: false), "the (N+1)th")
        XCTAssertEqual(decide(1000, budget: 1000), .init(priority: 5, requestedPriority: 10, downgraded: true, counts: false))
        XCTAssertEqual(decide(999, budget: 1000).priority, 10)
    }

    func testBudgetZeroDowngradesEveryStateOnlyUpdate() {
        XCTAssertTrue(decide(0, budget: 0).downgraded)
        XCTAssertFalse(decide(0, budget: 0, .end).downgraded)
    }

    func testStartsEndsAndAlertsKeepTenAndStillCount() {
        for (kind, alert) in [(PushEvent.start, true), (.end, false), (.end, true), (.update, true)] {
            let d = decide(50, budget: 3, kind, alert: alert)
            XCTAssertEqual(d, .init(priority: 10, requestedPriority: 10, downgraded: false, counts: true), "\(kind) alert=\(alert)")
        }
    }

    func testRequestedFiveIsSentAsIsAndNeverCounts() {
        XCTAssertEqual(decide(0, requested: 5), .init(priority: 5, requestedPriority: 5, downgraded: false, counts: false))
        XCTAssertEqual(decide(99, requested: 5), .init(priority: 5, requestedPriority: 5, downgraded: false, counts: false))
        XCTAssertEqual(decide(0, .start, alert: true, requested: 5).counts, false)
    }

    func testAndroidIsUnaffected() {
        for kind in PushEvent.allCases {
            XCTAssertEqual(
                decide(1000, budget: 0, kind, platform: "android"),
                .init(priority: 10, requestedPriority: 10, downgraded: false, counts: false))
        }
    }

    func testWindowIsSixtyMinutesExclusiveOfItsStart() {
        let t0: Int64 = 1_800_000_000_000
        let sends = [t0, t0 + 1000, t0 + 2000]
        XCTAssertEqual(PriorityBudget.sendsInWindow(sends, nowMs: t0 + 2000), 3)
        XCTAssertEqual(PriorityBudget.sendsInWindow(sends, nowMs: t0 + 3_599_999), 3, "59:59.999 after the first send it still counts")
        XCTAssertEqual(PriorityBudget.sendsInWindow(sends, nowMs: t0 + 3_600_000), 2, "exactly 60 minutes later it does not")
        XCTAssertEqual(PriorityBudget.sendsInWindow(sends, nowMs: t0 + 3_602_000), 0)
        XCTAssertEqual(PriorityBudget.sendsInWindow([], nowMs: t0), 0)
    }

    func testRecordSendTrimsToTheWindowAndTheLargestBudget() {
        let t0: Int64 = 1_800_000_000_000
        XCTAssertEqual(PriorityBudget.recordSend([t0, t0 + 10], atMs: t0 + 3_600_000), [t0 + 10, t0 + 3_600_000])
        XCTAssertEqual(PriorityBudget.recordSend([t0 + 5, t0], atMs: t0 + 7), [t0, t0 + 5, t0 + 7], "kept oldest first")
        let full = (0..<Int64(1000)).map { t0 + $0 }
        let next = PriorityBudget.recordSend(full, atMs: t0 + 1000)
        XCTAssertEqual(next.count, PriorityBudget.maxBudget)
        XCTAssertEqual(next.first, t0 + 1)
        XCTAssertEqual(next.last, t0 + 1000)
        // A capped window still decides exactly for every budget up to the maximum.
        XCTAssertTrue(decide(PriorityBudget.sendsInWindow(next, nowMs: t0 + 1000), budget: PriorityBudget.maxBudget).downgraded)
    }

    func testBudgetChoice() {
        let d = PriorityBudget.Defaults(priority10HourlyBudget: 40, frequentUpdatesHourlyBudget: 240)
        XCTAssertEqual(PriorityBudget.budget(frequentUpdates: false, tenantPriority10: nil, tenantFrequentUpdates: nil, defaults: d), 40)
        XCTAssertEqual(PriorityBudget.budget(frequentUpdates: true, tenantPriority10: nil, tenantFrequentUpdates: nil, defaults: d), 240)
        XCTAssertEqual(PriorityBudget.budget(frequentUpdates: false, tenantPriority10: 7, tenantFrequentUpdates: 9, defaults: d), 7)
        XCTAssertEqual(PriorityBudget.budget(frequentUpdates: true, tenantPriority10: 7, tenantFrequentUpdates: 9, defaults: d), 9)
        XCTAssertEqual(PriorityBudget.budget(frequentUpdates: true, tenantPriority10: 7, tenantFrequentUpdates: nil, defaults: d), 240)
        XCTAssertEqual(PriorityBudget.Defaults.standard, d)
    }

    func testEpochMillisecondsFloors() {
        XCTAssertEqual(PriorityBudget.epochMilliseconds(Date(timeIntervalSince1970: 1.9999)), 1999)
        XCTAssertEqual(PriorityBudget.epochMilliseconds(Date(timeIntervalSince1970: 1_800_000_000.25)), 1_800_000_000_250)
    }
}
