import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore

/// `GET /v1/remote-updates/usage/daily` (docs/console.md "Outcomes per day"): operations per UTC
/// day by status and the day's used quota, master key only, `days` 1…31.
final class UsageDailyTests: APITestCase {

    func testCountsPerDayByStatusZeroFilledAndTenantScoped() throws {
        let w = try LifecycleWorld.make(env)
        let a = w.start(), b = w.start(), c = w.start()
        XCTAssertEqual(w.update(a, ["eta": 11], revision: 1).status, 202)
        // Statuses the dispatcher would set, and one operation backdated by two days.
        let ops = try env.db.tenant(w.tenant.id) { conn in
            try conn.query("SELECT id, target_id, kind FROM operations WHERE tenant_id = $1 ORDER BY id", [w.tenant.id])
                .map { (try $0.string("id"), try $0.string("target_id"), try $0.string("kind")) }
        }
        XCTAssertEqual(ops.count, 4)
        try env.db.tenant(w.tenant.id) { conn in
            try conn.execute("UPDATE operations SET status = 'accepted' WHERE tenant_id = $1 AND target_id = $2", [w.tenant.id, a])
            try conn.execute("UPDATE operations SET status = 'failed' WHERE tenant_id = $1 AND target_id = $2", [w.tenant.id, b])
            try conn.execute("UPDATE operations SET created_at = now() - interval '2 days' WHERE tenant_id = $1 AND target_id = $2", [w.tenant.id, c])
            // quota_used comes from the quota counters, which the status triggers move on acceptance.
        }
        // Another tenant's operation never shows.
        let other = try LifecycleWorld.make(env)
        _ = other.start()

        let r = env.call("GET", "/v1/remote-updates/usage/daily", as: w.tenant.master)
        XCTAssertEqual(r.status, 200, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["object"]?.stringValue, "usage_daily")
        XCTAssertEqual(r["days"]?.intValue, 7)
        let data = r["data"]?.arrayValue ?? []
        XCTAssertEqual(data.count, 7)
        XCTAssertEqual(data.compactMap { $0["day"]?.stringValue }, DailyOutcomes.dates(endingAt: Date(), days: 7))
        let today = data[6], twoAgo = data[4]
        XCTAssertEqual(today["outcomes"]?["accepted"]?.intValue, 2)
        XCTAssertEqual(today["outcomes"]?["failed"]?.intValue, 1)
        XCTAssertEqual(today["outcomes"]?["queued"]?.intValue, 0)
        XCTAssertEqual(today["total"]?.intValue, 3)
        XCTAssertEqual(today["quota_used"]?.intValue, 2)
        XCTAssertEqual(twoAgo["outcomes"]?["queued"]?.intValue, 1)
        XCTAssertEqual(twoAgo["total"]?.intValue, 1)
        for d in data {
            XCTAssertEqual(Set(d["outcomes"]?.objectValue?.keys.map { $0 } ?? []), Set(OperationStatus.allCases.map(\.rawValue)))
        }
        XCTAssertEqual(data.compactMap { $0["total"]?.intValue }.reduce(0, +), 4)

        let one = env.call("GET", "/v1/remote-updates/usage/daily?days=1", as: w.tenant.master)
        XCTAssertEqual(one.status, 200)
        XCTAssertEqual(one["data"]?.arrayValue?.count, 1)
        XCTAssertEqual(one["data"]?.arrayValue?.first?["total"]?.intValue, 3, "the backdated operation is outside a one-day series")
    }

    func testDaysBoundaries() throws {
        let t = try env.tenant()
        for ok in [1, 31] {
            let r = env.call("GET", "/v1/remote-updates/usage/daily?days=\(ok)", as: t.master)
            XCTAssertEqual(r.status, 200, "days=\(ok)")
            XCTAssertEqual(r["data"]?.arrayValue?.count, ok)
        }
        for bad in ["0", "32", "-1", "7.5", "seven", "", "%00"] {
            let r = env.call("GET", "/v1/remote-updates/usage/daily?days=\(bad)", as: t.master)
            XCTAssertEqual(r.status, 400, "days=\(bad)")
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST", "days=\(bad)")
            XCTAssertEqual(r["error"]?["details"]?["field"]?.stringValue, "days", "days=\(bad)")
        }
    }

    func testMasterKeyOnly() throws {
        let w = try LifecycleWorld.make(env)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/usage/daily").status, 401)
        let sender = env.call("GET", "/v1/remote-updates/usage/daily", as: w.sender.credential)
        XCTAssertEqual(sender.status, 403)
        XCTAssertEqual(sender.errorCode, "PERMISSION_DENIED")
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/usage/daily", as: w.installationCredential).status, 403)
    }
}
