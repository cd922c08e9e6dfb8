import Foundation
import XCTest
@testable import LiveRelayStore
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

    /// The fair claim probes each operation by its target even when the planner's statistics
    /// are stale (docs/delivery.md "Claims"): `operations` analyzed with one row, then 3,000
    /// queued operations added (a tenant's first burst) before anything re-analyzes it. No
    /// operation is found by an index's `tenant_id` prefix alone, no step walks every target of
    /// an installation, nothing is scanned whole. The former statement named no target for the
    /// operation (this test fails on it) and probed targets by `tenant_id` alone here, and a claim in
    /// deploy/bench/fanout walked 505,050 targets through `targets_installation` (23.9 s).
    func testTheFairClaimProbesOperationsByTargetWithStaleStatistics() throws {
        let a = try h.tenant(), inst = try h.installation(a)
        _ = try h.update(a, target: try h.target(a, installation: inst, token: "stale-0"), state: ["eta": 0])
        try h.db.system { c in
            for t in ["operations", "targets", "dispatch_heads", "installations", "start_targets", "target_clocks"] {
                try c.execute("ANALYZE \(t)")
            }
        }
        XCTAssertLessThan(try reltuples("operations"), 10, "analyzed while nearly empty")
        try h.loadQueue(tenant: a, installation: inst, prefix: "b", count: 3000, analyze: false)
        let plan = try h.db.system(settings: DispatchStore.claimSettings) { c in
            try c.query(
                "EXPLAIN (COSTS OFF) " + DispatchStore.fairClaimSQL, ["w-plan", 512, 512, "0", 30.0, Int64(Date().timeIntervalSince1970), "{}", 512]
            )
            .map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
        }
        XCTAssertTrue(
            plan.contains("(target_id = candidates.target_id)"), "each operation is probed by its tenant and target:\n\(plan)")
        // An index scan on operations whose condition is the tenant alone reads the tenant's
        // whole queue once per claimed row.
        let lines = plan.split(separator: "\n").map(String.init)
        // Targets are not checked: their probe by primary key can still lose to the smaller
        // `targets_start_target` index under such statistics (DispatchStore.claimTail).
        for (n, line) in lines.enumerated() where line.contains(" on operations ") {
            guard n + 1 < lines.count, line.contains("Index") else { continue }
            let cond = lines[n + 1].trimmingCharacters(in: .whitespaces)
            XCTAssertFalse(
                cond.range(of: #"^Index Cond: \(tenant_id = [a-z_0-9]+\.tenant_id\)$"#, options: .regularExpression) != nil,
                "probed by the tenant alone: \(line) / \(cond)\n\(plan)")
        }
        XCTAssertFalse(plan.contains("targets_installation"), "no walk over an installation's targets:\n\(plan)")
        XCTAssertFalse(plan.contains("Seq Scan on operations") || plan.contains("Seq Scan on targets"), "no full scans:\n\(plan)")
    }
}
