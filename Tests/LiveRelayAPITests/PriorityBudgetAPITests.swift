import Foundation
import XCTest
import LiveRelayTestSupport
import JSON
import LiveRelayCore
import LiveRelayStore

/// docs/priority-budget.md through the API: the operator's budget fields at their exact
/// bounds, the tenant object, capabilities, and the new fields of targets and operations.
final class PriorityBudgetAPITests: TenancyTestCase {
    func testOperatorBudgetsAcceptZeroToOneThousandAndRefuseEverythingElseNamingTheField() throws {
        let t = try tenant()
        let op = try operatorKey()
        let path = "/v1/operator/tenants/\(t.id)"
        let fresh = call("GET", path, as: op)
        XCTAssertEqual(fresh["priority10_hourly_budget"], .null, "null: the deployment default")
        XCTAssertEqual(fresh["frequent_updates_hourly_budget"], .null)

        for field in ["priority10_hourly_budget", "frequent_updates_hourly_budget"] {
            for ok: Int64 in [0, 1000, 40] {
                let r = call("PATCH", path, .object([field: .int(ok)]), as: op)
                XCTAssertEqual(r.status, 200, "\(field)=\(ok): \(r.text)")
                XCTAssertEqual(r[field]?.intValue, ok)
            }
            let bad: [JSONValue] = [.int(-1), .int(1001), .double(10.5), "10", .bool(true), [10], ["n": 1]]
            for value in bad {
                let r = call("PATCH", path, .object([field: value]), as: op)
                XCTAssertEqual(r.status, 400, "\(field)=\(value): \(r.text)")
                XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
                XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field, "\(value)")
            }
            XCTAssertEqual(call("GET", path, as: op)[field]?.intValue, 40, "a refused PATCH changed nothing")
        }
        // Both at once, with the other fields.
        let both = call("PATCH", path, ["priority10_hourly_budget": 7, "frequent_updates_hourly_budget": 70, "daily_push_quota": 5], as: op)
        XCTAssertEqual(both["priority10_hourly_budget"], 7)
        XCTAssertEqual(both["frequent_updates_hourly_budget"], 70)
        XCTAssertEqual(both["daily_push_quota"], 5)
        let audit = try env.db.system { c in
            try c.query(
                "SELECT details::text AS d FROM audit_events WHERE tenant_id = $1 AND action = 'tenant.update' ORDER BY created_at DESC LIMIT 1",
                [t.id])[0].string("d")
        }
        XCTAssertTrue(audit.contains("priority10_hourly_budget"), audit)
        // The column CHECKs are the second wall.
        XCTAssertThrowsError(
            try env.db.system { c in
                try c.execute("UPDATE tenants SET priority10_hourly_budget = 1001 WHERE tenant_id = $1", [t.id])
            })
        // A master key cannot change budgets.
        XCTAssertEqual(call("PATCH", path, ["priority10_hourly_budget": 1], as: t.master).status, 403)
    }

    func testCapabilitiesReportTheDefaultBudgets() throws {
        let t = try tenant()
        let caps = call("GET", "/v1/remote-updates/capabilities", as: t.master)
        let b = caps["delivery"]?["priority_budget"]
        XCTAssertEqual(b?["priority10_hourly_budget"], 40)
        XCTAssertEqual(b?["frequent_updates_hourly_budget"], 240)
        XCTAssertEqual(b?["window_seconds"], 3600)
        XCTAssertEqual(b?["max_hourly_budget"], 1000)
        XCTAssertEqual(b?["platforms"], ["ios"])
    }

    /// A tenant, a sender key and an accepted (queued) remote start on an iOS start target.
    func remoteStart() throws -> (TestEnvironment.Tenant, Fixtures.Key, TestEnvironment.Reply) {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let key = try Fixtures.senderKey(env, master: t.master, targets: [st], createdFrom: [st])
        let started = call(
            "POST", "/v1/remote-updates/live-activities/start",
            [
                "start_target_id": .string(st), "template_version": "tv_test", "state": ["eta": 1],
                "alert": ["title": "a", "body": "b"], "idempotency_key": "s1"
            ], as: key.credential)
        guard started.status == 202 else { throw FixtureFailure("start failed: \(started.text)") }
        return (t, key, started)
    }

    /// Targets and operations carry the new fields from the first write on; the budget shown
    /// follows the tenant's setting and the installation's `frequent_updates`.
    func testTargetAndOperationObjectsCarryTheBudgetFields() throws {
        let (t, key, started) = try remoteStart()
        let op = try operatorKey()
        XCTAssertEqual(started["operation"]?["priority"], 10)
        XCTAssertEqual(started["operation"]?["requested_priority"], 10)
        XCTAssertEqual(started["operation"]?["priority_downgraded"], false)
        XCTAssertEqual(started["target"]?["priority10_sent_last_hour"], 0)
        XCTAssertEqual(started["target"]?["priority10_budget"], 40)
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        XCTAssertEqual(
            call(
                "PATCH", "/v1/operator/tenants/\(t.id)", ["priority10_hourly_budget": 12, "frequent_updates_hourly_budget": 99],
                as: op
            ).status, 200)
        let read = call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)", as: key.credential)
        XCTAssertEqual(read["priority10_budget"], 12)
        let listed = call("GET", "/v1/remote-updates/live-activities/targets", as: key.credential)
        XCTAssertEqual(listed["data"]?.arrayValue?.first?["priority10_budget"], 12)
        // The installation now reports frequent updates: its targets get the other budget.
        let inst = try env.db.system { c in try c.query("SELECT installation_id FROM targets WHERE id = $1", [tgt])[0].string("installation_id") }
        _ = try env.db.system { c in try c.execute("UPDATE installations SET frequent_updates = true WHERE id = $1", [inst]) }
        XCTAssertEqual(call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)", as: key.credential)["priority10_budget"], 99)
        let opId = try XCTUnwrap(started["operation"]?["id"]?.stringValue)
        let read2 = call("GET", "/v1/remote-updates/operations/\(opId)", as: key.credential)
        XCTAssertEqual(read2["requested_priority"], 10)
    }

    /// The deployment defaults reach SQL through `Database`'s settings: the budget SQL computes
    /// (claims, target reads, event objects) follows `LIVERELAY_*_HOURLY_BUDGET`, and a
    /// tenant's own value wins over it.
    func testDeploymentDefaultsReachSQLThroughTheDatabaseSettings() throws {
        let (t, _, started) = try remoteStart()
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        let custom = Database(
            pool: env.db.pool, settings: PriorityBudgetSQL.settings(.init(priority10HourlyBudget: 7, frequentUpdatesHourlyBudget: 70)))
        func budgets(_ db: Database) throws -> (record: Int?, sql: Int?, event: Int?) {
            try db.tenant(t.id) { c in
                let r = try TargetStore.get(c, tenantId: t.id, id: tgt)
                let row = try c.query(
                    """
                    SELECT lr_priority10_budget(tenant_id, installation_id) AS b, (lr_target_object(targets) ->> 'priority10_budget')::int AS e
                      FROM targets WHERE tenant_id = $1 AND id = $2
                    """, [t.id, tgt])[0]
                return (r?.priority10Budget, try row.optionalInt("b"), try row.optionalInt("e"))
            }
        }
        let standard = try budgets(env.db)
        XCTAssertEqual([standard.record, standard.sql, standard.event], [40, 40, 40], "no settings: the built-in defaults")
        let seven = try budgets(custom)
        XCTAssertEqual([seven.record, seven.sql, seven.event], [7, 7, 7])
        let inst = try env.db.system { c in try c.query("SELECT installation_id FROM targets WHERE id = $1", [tgt])[0].string("installation_id") }
        _ = try env.db.system { c in try c.execute("UPDATE installations SET frequent_updates = true WHERE id = $1", [inst]) }
        let seventy = try budgets(custom)
        XCTAssertEqual([seventy.record, seventy.sql, seventy.event], [70, 70, 70])
        _ = try env.db.system { c in try c.execute("UPDATE tenants SET frequent_updates_hourly_budget = 3 WHERE tenant_id = $1", [t.id]) }
        let own = try budgets(custom)
        XCTAssertEqual([own.record, own.sql, own.event], [3, 3, 3], "the tenant's own value wins")
    }
}
