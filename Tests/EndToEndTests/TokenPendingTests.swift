import Foundation
import XCTest
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelayTestSupport

/// The seed's "starting shown ≠ update token registered": writes made before the iOS device
/// registered its update token wait for it, coalesce, and reach the device in order.
final class TokenPendingTests: EndToEndTestCase {

    func testUpdatesBeforeTheUpdateTokenWaitCoalesceAndArriveInOrder() throws {
        try h.requireDispatcher()
        let h = h!
        let tenant = try h.tenantWithSandboxCredentials(appId: TourTests.appId)
        let device = try h.device(.ios, appId: TourTests.appId, publishable: tenant.publishable)
        let prepared = try device.prepare(template: try EndToEndHarness.demoTemplate())
        let st = try XCTUnwrap(prepared["start_target_id"]?.stringValue), tv = try XCTUnwrap(prepared["template_version"]?.stringValue)
        let sender = try h.senderKey(startTarget: st, idempotencyKey: "k", as: tenant.master)

        // The device is not reading pushes yet: the start is delivered, the update token is not registered.
        let started = h.startPreparing(startTarget: st, templateVersion: tv, idempotencyKey: "s", query: "?wait_ms=10000", as: sender)
        XCTAssertEqual(started.status, 202, "\(started)")
        XCTAssertEqual(started["operation"]?["status"]?.stringValue, "accepted", "\(started)")
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        eventually("the delivered start leaves the target waiting for its token") {
            h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)", as: sender)["status"]?.stringValue == "token_pending"
        }
        let pending = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)?wait_until_ready_ms=300", as: sender)
        XCTAssertEqual(pending.status, 409, "\(pending)")
        XCTAssertEqual(pending.errorCode, "TOKEN_PENDING")
        XCTAssertEqual(pending.json["error"]?["details"]?["status"]?.stringValue, "token_pending")

        // Two state-only updates while waiting: the first is superseded by the second.
        let u1 = h.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(tgt), "state": ["message": "Packed"], "expected_revision": 1, "idempotency_key": "u1"
            ], as: sender)
        XCTAssertEqual(u1.status, 202, "\(u1)")
        XCTAssertEqual(u1["operation"]?["status"]?.stringValue, "queued", "no token yet: \(u1)")
        let u2 = h.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(tgt), "state": ["message": "Updated from server"], "expected_revision": 2, "idempotency_key": "u2"
            ],
            as: sender)
        XCTAssertEqual(u2.status, 202, "\(u2)")
        let op1 = try XCTUnwrap(u1["operation"]?["id"]?.stringValue), op2 = try XCTUnwrap(u2["operation"]?["id"]?.stringValue)
        let first = h.call("GET", "/v1/remote-updates/operations/\(op1)", as: sender)
        XCTAssertEqual(first["status"]?.stringValue, "superseded", "\(first)")
        XCTAssertEqual(first["superseded_by"]?.stringValue, op2)

        // Now the device runs: it shows the start, registers its token, then gets only the newest state.
        device.startBackground(interval: 0.05)
        let ready = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)?wait_until_ready_ms=30000", as: sender)
        XCTAssertEqual(ready["status"]?.stringValue, "ready", "\(ready)")
        XCTAssertEqual(ready["revision"]?.intValue, 3)
        XCTAssertTrue(device.waitFor(timeout: 20) { $0.activity(tgt)?.state == ["message": "Updated from server"] }, device.lockScreen)
        eventually("the newest update is accepted") {
            h.call("GET", "/v1/remote-updates/operations/\(op2)", as: sender)["status"]?.stringValue == "accepted"
        }
        let tokens = Set([device.state.activity(tgt)?.updateToken ?? ""])
        let updates = h.sandbox.deliveries(provider: "apns").filter { tokens.contains($0.token) }
        XCTAssertEqual(
            updates.map { $0.payload["aps"]?["content-state"]?["message"]?.stringValue ?? "" }, ["Updated from server"],
            "the superseded state was never sent")
        let snap = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)/snapshot", as: sender)
        XCTAssertEqual(snap["revision"]?.intValue, 3)
        XCTAssertEqual(snap["state"], ["message": "Updated from server"])
        XCTAssertNil(device.lastError)
    }
}
