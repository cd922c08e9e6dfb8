import Foundation
import XCTest
import JSON

/// `liverelay admin …` as the real binary, straight on a test database: output shapes (docs/configuration.md
/// for `tenants create` and `operator-keys create`), and that the changes reach the live API.
final class AdminCLITests: XCTestCase {
    var env: CLIEnvironment!

    override func setUpWithError() throws { env = try CLIEnvironment.make() }
    override func tearDown() { env?.tearDown() }

    func testCreateOutputsMatchSpec() throws {
        let op = try env.admin(["operator-keys", "create"])
        XCTAssertEqual(op.status, 0, op.stderr)
        XCTAssertEqual(Set(op.json.objectValue?.keys.map { $0 } ?? []), ["id", "credential"])
        XCTAssertTrue(op.json["credential"]?.stringValue?.hasPrefix("lro_") == true)
        XCTAssertEqual(op.stdout.split(separator: "\n").count, 1, "one JSON object on one line")

        let t = try env.admin(["tenants", "create", "--name", "Acme", "--daily-push-quota", "77"])
        XCTAssertEqual(t.status, 0, t.stderr)
        XCTAssertEqual(t.json["tenant"]?["name"]?.stringValue, "Acme")
        XCTAssertEqual(t.json["tenant"]?["daily_push_quota"]?.intValue, 77)
        XCTAssertTrue(t.json["tenant"]?["id"]?.stringValue?.hasPrefix("ten_") == true)
        XCTAssertTrue(t.json["master_key"]?["id"]?.stringValue?.hasPrefix("mk_") == true)
        XCTAssertTrue(t.json["master_key"]?["credential"]?.stringValue?.hasPrefix("lrm_") == true)

        let bad = try env.admin(["tenants", "create"])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        let unknown = try env.admin(["tenants", "explode"])
        XCTAssertEqual(unknown.status, 2, unknown.stderr)
    }

    func testListSuspendResumeAndQuota() throws {
        let a = try env.admin(["tenants", "create", "--name", "A"]).json
        _ = try env.admin(["tenants", "create", "--name", "B"])
        let tenant = try XCTUnwrap(a["tenant"]?["id"]?.stringValue)
        let master = try XCTUnwrap(a["master_key"]?["credential"]?.stringValue)

        let list = try env.admin(["tenants", "list"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.json["data"]?.arrayValue?.count, 2)
        XCTAssertEqual(list.json["next_cursor"], .null)
        let page = try env.admin(["tenants", "list", "--limit", "1"])
        XCTAssertEqual(page.json["data"]?.arrayValue?.count, 1)
        let cursor = try XCTUnwrap(page.json["next_cursor"]?.stringValue)
        let page2 = try env.admin(["tenants", "list", "--limit", "1", "--cursor", cursor])
        XCTAssertEqual(page2.json["data"]?.arrayValue?.first?["name"]?.stringValue, "B")

        let quota = try env.admin(["tenants", "set-quota", "--tenant", tenant, "--daily-push-quota", "5"])
        XCTAssertEqual(quota.status, 0, quota.stderr)
        XCTAssertEqual(quota.json["daily_push_quota"]?.intValue, 5)
        let usage = try env.admin(["usage", "--tenant", tenant])
        XCTAssertEqual(usage.status, 0, usage.stderr)
        XCTAssertEqual(usage.json["limit"]?.intValue, 5)
        XCTAssertEqual(usage.json["remaining"]?.intValue, 5)
        XCTAssertEqual(usage.json["tenant_id"]?.stringValue, tenant)
        for k in ["day", "used", "reserved", "resets_at"] { XCTAssertNotNil(usage.json[k], k) }
        let apiUsage = try env.remote(["usage"], key: master)
        XCTAssertEqual(apiUsage.json["limit"]?.intValue, 5)

        let suspend = try env.admin(["tenants", "suspend", "--tenant", tenant])
        XCTAssertEqual(suspend.status, 0, suspend.stderr)
        XCTAssertEqual(suspend.json["status"]?.stringValue, "suspended")
        var denied = try env.remote(["capabilities"], key: master)
        for _ in 0..<50 where denied.status == 0 {  // the suspension reaches the API's cache via NOTIFY
            Thread.sleep(forTimeInterval: 0.05)
            denied = try env.remote(["capabilities"], key: master)
        }
        XCTAssertEqual(denied.status, 3)
        XCTAssertTrue(denied.stderr.hasPrefix("TENANT_SUSPENDED (HTTP 403)"), denied.stderr)

        let resume = try env.admin(["tenants", "resume", "--tenant", tenant])
        XCTAssertEqual(resume.json["status"]?.stringValue, "active")

        let missing = try env.admin(["tenants", "suspend", "--tenant", "ten_00000000000000000000000000"])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.contains("no tenant"), missing.stderr)
        let noUsage = try env.admin(["usage"])
        XCTAssertEqual(noUsage.status, 2)
    }

    func testMasterKeyRotation() throws {
        let a = try env.admin(["tenants", "create", "--name", "Rotating"]).json
        let tenant = try XCTUnwrap(a["tenant"]?["id"]?.stringValue)
        let oldKey = try XCTUnwrap(a["master_key"]?["credential"]?.stringValue)
        let oldId = try XCTUnwrap(a["master_key"]?["id"]?.stringValue)

        // With a grace period the old key is `revoking` and still works.
        let graceful = try env.admin(["master-keys", "rotate", "--tenant", tenant, "--grace", "3600"])
        XCTAssertEqual(graceful.status, 0, graceful.stderr)
        let second = try XCTUnwrap(graceful.json["master_key"]?["credential"]?.stringValue)
        XCTAssertEqual(graceful.json["master_key"]?["status"]?.stringValue, "active")
        XCTAssertEqual(graceful.json["revoked"]?.arrayValue?.map { $0["id"]?.stringValue ?? "" }, [oldId])
        XCTAssertEqual(graceful.json["revoked"]?.arrayValue?.first?["status"]?.stringValue, "revoking")
        XCTAssertEqual(try env.remote(["capabilities"], key: oldKey).status, 0)
        XCTAssertEqual(try env.remote(["capabilities"], key: second).status, 0)

        // Without one, every other active key stops at once; the revoking one keeps its expiry.
        let now = try env.admin(["master-keys", "rotate", "--tenant", tenant, "--grace", "0"])
        XCTAssertEqual(now.status, 0, now.stderr)
        let third = try XCTUnwrap(now.json["master_key"]?["credential"]?.stringValue)
        XCTAssertEqual(now.json["revoked"]?.arrayValue?.count, 1, "only the active second key; the first was already revoking")
        var old = try env.remote(["capabilities"], key: second)
        for _ in 0..<50 where old.status == 0 {
            Thread.sleep(forTimeInterval: 0.05)
            old = try env.remote(["capabilities"], key: second)
        }
        XCTAssertEqual(old.status, 3)
        XCTAssertTrue(old.stderr.hasPrefix("UNAUTHENTICATED (HTTP 401)"), old.stderr)
        XCTAssertEqual(try env.remote(["capabilities"], key: third).status, 0)

        let keys = env.call("GET", "/v1/master-keys", as: third)
        XCTAssertEqual(keys.json["data"]?.arrayValue?.count, 3)
        let bad = try env.admin(["master-keys", "rotate", "--tenant", tenant, "--grace", "-1"])
        XCTAssertEqual(bad.status, 2)
    }
}
