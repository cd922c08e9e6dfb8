import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// docs/credentials.md: every endpoint of the credentials issue × every kind of caller → the expected
/// status, as one table. Objects of another tenant are indistinguishable from absent ones.
final class AuthorizationMatrixTests: XCTestCase {
    enum Who: String, CaseIterable {
        case none, malformed, badChecksum, revoked, expired, `operator`, master, sender, publishable, installation, otherMaster
    }

    func testMatrix() throws {
        let env = try TestEnvironment.make()
        defer { env.tearDown() }
        let op = try env.operatorKey()
        let t = try env.tenant()
        let other = try env.tenant(name: "Other")
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let sender = try Fixtures.senderKey(env, master: t.master, targets: [st])
        let revokedSender = try Fixtures.senderKey(env, master: t.master, targets: [st])
        XCTAssertEqual(env.call("POST", "/v1/remote-updates/sender-keys/\(revokedSender.id)/revoke", [:], as: t.master).status, 200)
        let expiredSender = try Fixtures.senderKey(env, master: t.master, targets: [st])
        _ = try env.db.system { c in
            try c.execute("UPDATE sender_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [expiredSender.id])
        }
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        var badChecksum = Array(t.master)
        badChecksum[badChecksum.count - 1] = badChecksum.last == "A" ? "B" : "A"

        let creds: [Who: String?] = [
            .none: nil, .malformed: "lrm_not-a-credential", .badChecksum: String(badChecksum), .revoked: revokedSender.credential,
            .expired: expiredSender.credential, .operator: op, .master: t.master, .sender: sender.credential,
            .publishable: t.publishable, .installation: inst.credential, .otherMaster: other.master
        ]
        var n = 0
        func key() -> String { n += 1; return "k\(n)" }

        struct Row {
            let name: String
            let expect: [Who: Int]  // callers not listed: 401 for the invalid ones, 403 for valid others
            let make: () throws -> (String, String, JSONValue?)
        }
        let rows: [Row] = [
            Row(name: "create tenant", expect: [.operator: 201]) { ("POST", "/v1/operator/tenants", ["name": "T"]) },
            Row(name: "list tenants", expect: [.operator: 200]) { ("GET", "/v1/operator/tenants", nil) },
            Row(name: "get tenant", expect: [.operator: 200]) { ("GET", "/v1/operator/tenants/\(t.id)", nil) },
            Row(name: "patch tenant", expect: [.operator: 200]) { ("PATCH", "/v1/operator/tenants/\(t.id)", ["daily_push_quota": 999]) },
            Row(name: "create master key", expect: [.master: 201, .otherMaster: 201]) {
                ("POST", "/v1/master-keys", ["label": "m", "idempotency_key": .string(key())])
            },
            Row(name: "list master keys", expect: [.master: 200, .otherMaster: 200]) { ("GET", "/v1/master-keys", nil) },
            Row(name: "revoke master key", expect: [.master: 200, .otherMaster: 404]) {
                let spare = try Fixtures.masterKey(env, master: t.master)
                return ("POST", "/v1/master-keys/\(spare)/revoke", [:])
            },
            Row(name: "create sender key", expect: [.master: 201, .otherMaster: 400]) {
                (
                    "POST", "/v1/remote-updates/sender-keys",
                    [
                        "targets": [.string(st)], "created_from": [],
                        "permissions": ["activities:start"], "idempotency_key": .string(key())
                    ]
                )
            },
            Row(name: "list sender keys", expect: [.master: 200, .otherMaster: 200]) { ("GET", "/v1/remote-updates/sender-keys", nil) },
            Row(name: "get sender key", expect: [.master: 200, .otherMaster: 404]) { ("GET", "/v1/remote-updates/sender-keys/\(sender.id)", nil) },
            Row(name: "revoke sender key", expect: [.master: 200, .otherMaster: 404]) {
                let spare = try Fixtures.senderKey(env, master: t.master, targets: [st])
                return ("POST", "/v1/remote-updates/sender-keys/\(spare.id)/revoke", [:])
            },
            Row(name: "create publishable key", expect: [.master: 201, .otherMaster: 201]) {
                ("POST", "/v1/publishable-keys", ["app_id": "com.example.app", "platform": "ios"])
            },
            Row(name: "list publishable keys", expect: [.master: 200, .otherMaster: 200]) { ("GET", "/v1/publishable-keys", nil) },
            Row(name: "audit events", expect: [.master: 200, .otherMaster: 200]) { ("GET", "/v1/audit-events", nil) },
            Row(name: "register installation", expect: [.publishable: 201]) {
                (
                    "POST", "/v1/installations",
                    [
                        "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                        "install_id": .string(UUID().uuidString)
                    ]
                )
            },
            Row(name: "renew installation credential", expect: [.installation: 201]) {
                ("POST", "/v1/installations/\(inst.id)/credential/renew", [:])
            },
            Row(name: "patch installation attributes", expect: [.installation: 200]) {
                ("PATCH", "/v1/installations/\(inst.id)", ["os_version": "18.2"])
            },
            Row(name: "capabilities", expect: [.operator: 200, .master: 200, .sender: 200, .publishable: 200, .installation: 200, .otherMaster: 200])
            {
                ("GET", "/v1/remote-updates/capabilities", nil)
            }
        ]
        var failures: [String] = []
        for row in rows {
            for who in Who.allCases {
                let (method, path, body) = try row.make()
                let invalid: Set<Who> = [.none, .malformed, .badChecksum, .revoked, .expired]
                let expected = row.expect[who] ?? (invalid.contains(who) ? 401 : 403)
                let reply = env.call(method, path, body, as: creds[who]!)
                if reply.status != expected {
                    failures.append("\(row.name) as \(who): expected \(expected), got \(reply.status) \(reply.errorCode ?? "")")
                }
                if reply.status >= 400 {
                    XCTAssertNotNil(reply.errorCode, "\(row.name) as \(who): error envelope missing")
                    XCTAssertEqual(reply["error"]?["request_id"]?.stringValue, reply.headers["x-request-id"])
                }
            }
        }
        XCTAssertEqual(failures, [], failures.joined(separator: "\n"))
    }

    func testSuspendedTenantGets403OnEveryCredential() throws {
        let env = try TestEnvironment.make()
        defer { env.tearDown() }
        let op = try env.operatorKey()
        let t = try env.tenant()
        XCTAssertEqual(env.call("GET", "/v1/master-keys", as: t.master).status, 200)  // warm the cache
        XCTAssertEqual(env.call("PATCH", "/v1/operator/tenants/\(t.id)", ["status": "suspended"], as: op).status, 200)
        eventually("the suspension reaches the cache", within: 3) { env.call("GET", "/v1/master-keys", as: t.master).errorCode == "TENANT_SUSPENDED" }
        XCTAssertEqual(env.call("GET", "/v1/master-keys", as: t.master).status, 403)
        XCTAssertEqual(
            env.call(
                "POST", "/v1/installations",
                [
                    "platform": "ios", "app_id": "a", "environment": "sandbox",
                    "install_id": .string(UUID().uuidString)
                ], as: t.publishable
            ).errorCode, "TENANT_SUSPENDED")
        XCTAssertEqual(env.call("PATCH", "/v1/operator/tenants/\(t.id)", ["status": "active"], as: op).status, 200)
        eventually("the reactivation reaches the cache", within: 3) { env.call("GET", "/v1/master-keys", as: t.master).status == 200 }
    }
}
