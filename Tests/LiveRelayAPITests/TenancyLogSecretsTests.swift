import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// docs/credentials.md: a secret is shown exactly once, in the response that creates it — never in a log.
/// (Every tenancy test checks its own credentials at tear-down; this one runs a whole flow,
/// failures included, at the most verbose log level.)
final class TenancyLogSecretsTests: TenancyTestCase {
    func testLogsOfAWholeTenancyFlowHoldNoSecret() throws {
        let op = try operatorKey()
        let created = call("POST", "/v1/operator/tenants", ["name": "Logged"], as: op)
        XCTAssertEqual(created.status, 201, created.text)
        let tenantId = try XCTUnwrap(created["tenant"]?["id"]?.stringValue)
        let master = try XCTUnwrap(created["master_key"]?["credential"]?.stringValue)
        let publishable = try XCTUnwrap(created["publishable_key"]?["credential"]?.stringValue)
        let st = try Fixtures.startTarget(env, tenant: tenantId)

        let mk = call("POST", "/v1/master-keys", ["label": "second", "idempotency_key": "m1"], as: master)
        let second = try XCTUnwrap(mk["credential"]?.stringValue)
        XCTAssertEqual(call("POST", "/v1/master-keys", ["label": "second", "idempotency_key": "m1"], as: master)["credential"]?.stringValue, second)
        let skBody: JSONValue = ["targets": [.string(st)], "permissions": ["activities:start"], "idempotency_key": "s1"]
        let sk = call("POST", "/v1/remote-updates/sender-keys", skBody, as: second)
        let sender = try XCTUnwrap(sk["credential"]?.stringValue)
        _ = call("POST", "/v1/remote-updates/sender-keys", skBody, as: second)
        let pk = call("POST", "/v1/publishable-keys", ["app_id": "com.example.app", "platform": "ios", "idempotency_key": "p1"], as: master)
        let appKey = try XCTUnwrap(pk["credential"]?.stringValue)
        let reg = call(
            "POST", "/v1/installations",
            [
                "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                "install_id": .string(UUID().uuidString)
            ], as: appKey)
        let instId = try XCTUnwrap(reg["installation_id"]?.stringValue)
        let inst = try XCTUnwrap(reg["credential"]?.stringValue)
        let renewed = call("POST", "/v1/installations/\(instId)/credential/renew", [:], as: inst)
        let inst2 = try XCTUnwrap(renewed["credential"]?.stringValue)
        _ = call("PUT", "/v1/installations/\(instId)/fcm-token", ["token": "fcm"], as: inst2)
        _ = call("GET", "/v1/remote-updates/capabilities", as: sender)
        _ = call("GET", "/v1/audit-events", as: second)

        // Failures: wrong kind of key, credentials in odd places, bad checksums, revoked keys.
        _ = call("GET", "/v1/operator/tenants", as: master)
        _ = call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(sender)], "permissions": ["activities:start"],
                "idempotency_key": .string(master)
            ], as: second)
        _ = call("POST", "/v1/master-keys", ["label": .string(sender), "idempotency_key": "m1"], as: master)  // 422
        var broken = Array(publishable)
        broken[broken.count - 1] = broken.last == "A" ? "B" : "A"
        let brokenText = String(broken)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/capabilities", as: brokenText).status, 401)
        remember(brokenText)
        XCTAssertEqual(call("GET", "/v1/remote-updates/capabilities?key=\(master)", as: "Basic \(master)").status, 401)
        XCTAssertEqual(call("POST", "/v1/remote-updates/sender-keys/\(sk["id"]?.stringValue ?? "")/revoke", [:], as: second).status, 200)
        eventually("the revoked sender key stops working", within: 1) {
            self.env.call("GET", "/v1/remote-updates/capabilities", as: sender).status == 401
        }
        XCTAssertEqual(call("POST", "/v1/master-keys/\(created["master_key"]?["id"]?.stringValue ?? "")/revoke", [:], as: second).status, 200)
        _ = call("GET", "/v1/master-keys", as: master)

        let received = self.received.withLock { $0 }
        XCTAssertGreaterThanOrEqual(received.count, 9, "the flow handed out the credentials it should have")
        // Access-log lines are written after the response: wait for them, not for a guessed time.
        eventually("the access log lines arrive", within: 10) {
            env.logText.contains("\"msg\":\"request\"") && env.logText.components(separatedBy: "\n").count > 15
        }
        let logs = env.logText
        XCTAssertTrue(logs.contains("\"msg\":\"request\""), "the access log was captured")
        XCTAssertGreaterThan(logs.components(separatedBy: "\n").count, 15)
        assertNoSecretLogged(env)
    }
}
