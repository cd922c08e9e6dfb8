import XCTest
import LiveRelayApp
import LiveRelayCore

/// `LIVERELAY_PRIORITY10_HOURLY_BUDGET` and `LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET`
/// (docs/configuration.md, docs/priority-budget.md): defaults, exact bounds, and every problem
/// reported on its own line naming the variable.
final class ConfigurationBudgetTests: XCTestCase {
    func testDefaultsAndBounds() throws {
        XCTAssertEqual(
            try Configuration.load([:]).priorityBudgets, PriorityBudget.Defaults(priority10HourlyBudget: 40, frequentUpdatesHourlyBudget: 240))
        let low = try Configuration.load(["LIVERELAY_PRIORITY10_HOURLY_BUDGET": "0", "LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET": "0"])
        XCTAssertEqual(low.priorityBudgets, PriorityBudget.Defaults(priority10HourlyBudget: 0, frequentUpdatesHourlyBudget: 0))
        let high = try Configuration.load(["LIVERELAY_PRIORITY10_HOURLY_BUDGET": "1000", "LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET": "1000"])
        XCTAssertEqual(high.priorityBudgets, PriorityBudget.Defaults(priority10HourlyBudget: 1000, frequentUpdatesHourlyBudget: 1000))
    }

    func testBadValuesAreCollectedNamingTheVariable() {
        for bad in ["-1", "1001", "10.5", "forty", " 40"] {
            XCTAssertThrowsError(try Configuration.load(["LIVERELAY_PRIORITY10_HOURLY_BUDGET": bad])) { e in
                let problems = (e as? ConfigurationError)?.problems ?? []
                XCTAssertEqual(problems.count, 1, "\(bad): \(problems)")
                XCTAssertTrue(problems.first?.hasPrefix("LIVERELAY_PRIORITY10_HOURLY_BUDGET must be an integer in 0...1000") == true, "\(problems)")
            }
        }
        XCTAssertThrowsError(
            try Configuration.load([
                "LIVERELAY_PRIORITY10_HOURLY_BUDGET": "1001", "LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET": "-1",
                "LIVERELAY_LOG_LEVEL": "loud"
            ])
        ) { e in
            let problems = (e as? ConfigurationError)?.problems ?? []
            XCTAssertEqual(problems.count, 3, "every problem, one line each: \(problems)")
            XCTAssertTrue(problems.contains { $0.hasPrefix("LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET") })
        }
    }
}
