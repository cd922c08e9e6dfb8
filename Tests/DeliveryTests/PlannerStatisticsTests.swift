import Foundation
import XCTest
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// `PlannerStatistics.refresh` (docs/delivery.md "Planner statistics") on real PostgreSQL: a hot
/// table that grew past twice what the planner last counted is analyzed at once, and one that
/// has not moved since is left alone.
final class PlannerStatisticsTests: DispatchTestCase {
    func reltuples(_ table: String) throws -> Double {
        try h.db.system { c in try c.query("SELECT reltuples::float8 AS n FROM pg_class WHERE relname = $1", [table])[0].double("n") }
    }

    func testATableThatDoubledIsAnalyzedAndAnUnchangedOneIsNot() throws {
        let a = try h.tenant(), inst = try h.installation(a)
        XCTAssertLessThan(try reltuples("targets"), 1000, "the cloned database's planner has not counted targets yet")
        try h.db.tenant(a) { c in
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status)
                SELECT $1, 'tgt_s' || lpad(g::text, 6, '0'), $2, 'local', 'delivery', 'tv_test', 'ready', 1, '{"eta": 1}'::jsonb,
                       lpad(to_hex(g), 64, '0'), 'registered'
                  FROM generate_series(1, 2500) g
                """, [a, inst])
            _ = try c.query("SELECT pg_stat_force_next_flush()")  // the statistics system sees the inserts at the next idle
        }
        var analyzed: [String] = []
        eventually("refresh analyzes targets after 2,500 inserts", within: 30, every: 0.2) {
            analyzed = (try? h.db.system { c in try PlannerStatistics.refresh(c) }) ?? []
            return analyzed.contains("targets")
        }
        XCTAssertFalse(analyzed.contains("operations"), "operations did not change: \(analyzed)")
        XCTAssertGreaterThanOrEqual(try reltuples("targets"), 2500)
        XCTAssertFalse(try h.db.system { c in try PlannerStatistics.refresh(c) }.contains("targets"), "nothing changed since the analyze")
    }
}
