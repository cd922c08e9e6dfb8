import Foundation
import XCTest
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelaySandbox
import LiveRelayTestSupport

/// The README tour (the seed's remote-update flow) as automated tests, for iOS (APNs
/// push-to-start + update tokens) and Android (FCM data messages): operator → tenant → sandbox
/// provider credentials → device registers and prepares → sender key → start ("Preparing", alert
/// required) → wait until ready → snapshot → update with expected_revision ("Updated from
/// server") → end with dismiss_at now; then a local start with business key/generation and a
/// duplicate remote start (BUSINESS_GENERATION_CONFLICT), and a remote update of the local one.
final class TourTests: EndToEndTestCase {

    static let appId = "com.example.delivery"
    static let permissions: JSONValue = ["activities:start", "activities:read-state", "activities:update", "activities:end"]

    func testTourOnIOS() throws { try tour(.ios) }
    func testTourOnAndroid() throws { try tour(.android) }

    /// The part of the tour that needs no dispatcher: set-up, prepare, sender key, the start rules.
    func testTourSetUpWithoutDelivery() throws {
        let t = try h.tenantWithSandboxCredentials(appId: Self.appId)
        let creds = h.call("GET", "/v1/provider-credentials", as: t.master)
        XCTAssertEqual(creds.status, 200, "\(creds)")
        let ios = try h.device(.ios, appId: Self.appId, publishable: t.publishable)
        let prepared = try ios.prepare(template: try EndToEndHarness.demoTemplate())
        XCTAssertEqual(prepared["status"]?.stringValue, "ready", "the push-to-start token makes the start target ready")
        // Preparing again with the same content: same start target, same template version.
        let again = try ios.prepare(template: try EndToEndHarness.demoTemplate())
        XCTAssertEqual(again["start_target_id"], prepared["start_target_id"])
        XCTAssertEqual(again["template_version"], prepared["template_version"])
        let android = try h.device(.android, appId: Self.appId, publishable: t.publishable)
        let ap = try android.prepare(template: try EndToEndHarness.demoTemplate())
        XCTAssertEqual(ap["status"]?.stringValue, "ready", "an Android start target is ready once the FCM token is registered")
        XCTAssertEqual(ap["template_version"], prepared["template_version"], "same template content, same version (docs/templates.md)")
    }

    func tour(_ platform: DevicePlatform, file: StaticString = #filePath, line: UInt = #line) throws {
        try h.requireDispatcher()
        let h = h!
        // 1. Operator, tenant, sandbox provider credentials.
        let tenant = try h.tenantWithSandboxCredentials(appId: Self.appId)

        // 2. The device registers and prepares the demo template.
        let device = try h.device(platform, appId: Self.appId, publishable: tenant.publishable)
        let prepared = try device.prepare(template: try EndToEndHarness.demoTemplate())
        let st = try XCTUnwrap(prepared["start_target_id"]?.stringValue)
        let tv = try XCTUnwrap(prepared["template_version"]?.stringValue)
        XCTAssertTrue(st.hasPrefix("st_") && tv.hasPrefix("tv_"), "\(prepared)")
        XCTAssertEqual(prepared["status"]?.stringValue, "ready")
        device.startBackground(interval: 0.05)

        // 3. A sender key for that start target with the four permissions.
        let key = h.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(st)], "created_from": [.string(st)], "permissions": Self.permissions,
                "idempotency_key": "tour-sender-key", "label": "tour"
            ], as: tenant.master)
        XCTAssertEqual(key.status, 201, "\(key)")
        let sender = try XCTUnwrap(key["credential"]?.stringValue)

        // 4. Start: alert is required; then "Preparing".
        var start: [String: JSONValue] = [
            "start_target_id": .string(st), "template_version": .string(tv), "state": ["message": "Preparing"],
            "idempotency_key": "delivery:41:start:1"
        ]
        let noAlert = h.call("POST", "/v1/remote-updates/live-activities/start", .object(start), as: sender)
        XCTAssertEqual(noAlert.status, 400, "\(noAlert)")
        XCTAssertEqual(noAlert.errorCode, "INVALID_REQUEST")
        XCTAssertEqual(noAlert.json["error"]?["details"]?["field"]?.stringValue, "alert")
        start["alert"] = ["title": "Preparing", "body": "Your order is being prepared"]
        let started = h.call("POST", "/v1/remote-updates/live-activities/start", .object(start), as: sender)
        XCTAssertEqual(started.status, 202, "\(started)")
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        let startOp = try XCTUnwrap(started["operation"]?["id"]?.stringValue)
        XCTAssertEqual(started["operation"]?["kind"]?.stringValue, "start")
        XCTAssertEqual(started["operation"]?["revision"]?.intValue, 1)
        XCTAssertEqual(started["target"]?["revision"]?.intValue, 1)
        XCTAssertEqual(started["target"]?["status"]?.stringValue, "starting")
        XCTAssertTrue(["queued", "sending", "accepted"].contains(started["operation"]?["status"]?.stringValue ?? ""), "\(started)")

        // 5. Wait until ready: iOS needs the device to receive the push-to-start and register its
        //    update token; Android is ready once the start is delivered.
        let ready = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)?wait_until_ready_ms=30000", as: sender)
        XCTAssertEqual(ready.status, 200, "\(ready)")
        XCTAssertEqual(ready["status"]?.stringValue, "ready")
        XCTAssertEqual(ready["revision"]?.intValue, 1)
        XCTAssertEqual(ready["token_status"]?.stringValue, "registered")
        XCTAssertTrue(device.waitFor(timeout: 20) { $0.activity(tgt) != nil }, "the device shows the started activity")
        let startedBox = device.lockScreen(tgt) ?? ""
        XCTAssertTrue(startedBox.contains("message: Preparing"), startedBox)
        XCTAssertTrue(startedBox.contains("! Preparing: Your order is being prepared"), startedBox)
        XCTAssertTrue(startedBox.contains(tgt), startedBox)
        eventually("the start operation is accepted") {
            h.call("GET", "/v1/remote-updates/operations/\(startOp)", as: sender)["status"]?.stringValue == "accepted"
        }

        // 6. Snapshot.
        let snap = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)/snapshot", as: sender)
        XCTAssertEqual(snap.status, 200, "\(snap)")
        XCTAssertEqual(snap["target_id"]?.stringValue, tgt)
        XCTAssertEqual(snap["revision"]?.intValue, 1)
        XCTAssertEqual(snap["state"], ["message": "Preparing"])
        XCTAssertEqual(snap["status"]?.stringValue, "ready")

        // 7. Update with expected_revision; wait_ms waits for the provider's answer.
        let updateBody: JSONValue = [
            "target_id": .string(tgt), "state": ["message": "Updated from server"], "expected_revision": 1,
            "idempotency_key": "delivery:41:update:1"
        ]
        let updated = h.call("POST", "/v1/remote-updates/live-activities/update?wait_ms=10000", updateBody, as: sender)
        XCTAssertEqual(updated.status, 202, "\(updated)")
        XCTAssertEqual(updated["operation"]?["status"]?.stringValue, "accepted", "\(updated)")
        XCTAssertEqual(updated["operation"]?["revision"]?.intValue, 2)
        XCTAssertEqual(updated["target"]?["revision"]?.intValue, 2)
        XCTAssertEqual(updated["target"]?["status"]?.stringValue, "ready")
        XCTAssertTrue(
            device.waitFor(timeout: 20) { $0.activity(tgt)?.state == ["message": "Updated from server"] },
            "lock screen: \(device.lockScreen)")
        let updatedBox = device.lockScreen(tgt) ?? ""
        XCTAssertTrue(updatedBox.contains("message: Updated from server"), updatedBox)
        XCTAssertFalse(updatedBox.contains("! "), "an update without alert shows no banner: \(updatedBox)")
        // The same request again is a replay; a stale expected_revision is a conflict.
        let replay = h.call("POST", "/v1/remote-updates/live-activities/update", updateBody, as: sender)
        XCTAssertEqual(replay.status, 202, "\(replay)")
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay["operation"]?["id"], updated["operation"]?["id"])
        let stale = h.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(tgt), "state": ["message": "stale"], "expected_revision": 1, "idempotency_key": "delivery:41:update:stale"
            ],
            as: sender)
        XCTAssertEqual(stale.status, 409, "\(stale)")
        XCTAssertEqual(stale.errorCode, "REVISION_CONFLICT")
        XCTAssertEqual(stale.json["error"]?["details"]?["current_revision"]?.intValue, 2)

        // 8. End with dismiss_at now: removed from the lock screen at once.
        let ended = h.call(
            "POST", "/v1/remote-updates/live-activities/end?wait_ms=10000",
            [
                "target_id": .string(tgt), "idempotency_key": "delivery:41:end", "dismiss_at": .string(Timestamp.format(Date()))
            ], as: sender)
        XCTAssertEqual(ended.status, 202, "\(ended)")
        XCTAssertEqual(ended["operation"]?["kind"]?.stringValue, "end")
        XCTAssertEqual(ended["operation"]?["status"]?.stringValue, "accepted", "\(ended)")
        XCTAssertEqual(ended["operation"]?["consumes_quota"]?.boolValue, false, "a stateless end is cleanup")
        eventually("the target is ended") {
            let t = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)", as: sender)
            return t["status"]?.stringValue == "ended" && t["end_reason"]?.stringValue == "sender"
        }
        XCTAssertTrue(device.waitFor(timeout: 20) { $0.activity(tgt)?.phase == .dismissed }, "lock screen: \(device.lockScreen)")
        XCTAssertTrue(device.lockScreen(tgt)?.contains("Dismissed") ?? false)
        XCTAssertEqual(device.lockScreen, "(lock screen: no live activities)")
        XCTAssertEqual(device.state.activity(tgt)?.state, ["message": "Updated from server"], "the end carried the last committed state")
        let ops = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)/operations", as: sender)
        XCTAssertEqual(ops["data"]?.arrayValue?.map { $0["kind"]?.stringValue ?? "" }, ["end", "update", "start"])
        XCTAssertEqual(ops["data"]?.arrayValue?.map { $0["status"]?.stringValue ?? "" }, ["accepted", "accepted", "accepted"])
        let again = h.call(
            "POST", "/v1/remote-updates/live-activities/end",
            [
                "target_id": .string(tgt), "idempotency_key": "delivery:41:end:again"
            ], as: sender)
        XCTAssertEqual(again.status, 200, "\(again)")
        XCTAssertEqual(again["operation"]?["status"]?.stringValue, "cancelled")
        XCTAssertEqual(again["operation"]?["pending_reason"]?.stringValue, "already_ended")

        // What the provider received: start / update / end for this device, in order.
        let provider = platform == .ios ? "apns" : "fcm"
        let received = h.sandbox.deliveries(provider: provider).filter(\.accepted)
        let events = received.compactMap { $0.payload["aps"]?["event"]?.stringValue ?? $0.payload["message"]?["data"]?["event"]?.stringValue }
        XCTAssertEqual(events, ["start", "update", "end"])
        if platform == .ios {
            XCTAssertEqual(received.first?.headers["apns-topic"], Self.appId + ".push-type.liveactivity")
            XCTAssertEqual(received.first?.token, device.state.templates.first?.pushToStartToken, "the start went to the push-to-start token")
            XCTAssertEqual(received[1].token, device.state.activity(tgt)?.updateToken, "the update went to the registered update token")
            let ts = received.compactMap { $0.payload["aps"]?["timestamp"]?.intValue }
            XCTAssertEqual(ts, ts.sorted(), "APNs timestamps increase")
            XCTAssertEqual(Set(ts).count, 3, "APNs timestamps strictly increase")
        } else {
            XCTAssertEqual(Set(received.map(\.token)), [device.state.fcmToken ?? ""])
            let data = try XCTUnwrap(received.first?.payload["message"]?["data"])
            XCTAssertEqual(data["target_id"]?.stringValue, tgt)
            XCTAssertEqual(data["state"]?.stringValue, #"{"message":"Preparing"}"#)
            XCTAssertEqual(data["alert_title"]?.stringValue, "Preparing")
            XCTAssertEqual(received[1].payload["message"]?["data"]?["revision"]?.stringValue, "2")
            XCTAssertNotNil(received[2].payload["message"]?["data"]?["dismiss_at"])
        }

        // 9. Local start with a business key and generation, then a duplicate remote start.
        let local = try device.localStart(
            activityType: "delivery", businessKey: "delivery:42", businessGeneration: "1",
            state: ["message": "Preparing"])
        let localId = try XCTUnwrap(local["id"]?.stringValue)
        XCTAssertEqual(local["status"]?.stringValue, "ready", "\(local)")
        XCTAssertEqual(local["revision"]?.intValue, 1)
        XCTAssertEqual(local["origin"]?.stringValue, "local")
        XCTAssertTrue(device.lockScreen(localId)?.contains("message: Preparing") ?? false, device.lockScreen)
        start["business_key"] = "delivery:42"
        start["business_generation"] = "1"
        start["idempotency_key"] = "delivery:42:remote-start:1"
        let dup = h.call("POST", "/v1/remote-updates/live-activities/start", .object(start), as: sender)
        XCTAssertEqual(dup.status, 409, "\(dup)")
        XCTAssertEqual(dup.errorCode, "BUSINESS_GENERATION_CONFLICT")
        // This key cannot read the local target (below), so the holder is not named (docs/security.md "Business keys").
        XCTAssertNil(dup.json["error"]?["details"]?["target_id"])
        XCTAssertFalse(dup.json.jsonString.contains(localId))
        // created_from does not cover a local start; a key naming the target does (seed: local start, remote updates).
        let denied = h.call("GET", "/v1/remote-updates/live-activities/targets/\(localId)/snapshot", as: sender)
        XCTAssertEqual(denied.status, 403, "\(denied)")
        let localKey = h.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(localId)], "created_from": [], "permissions": ["activities:read-state", "activities:update"],
                "idempotency_key": "tour-local-key"
            ], as: tenant.master)
        XCTAssertEqual(localKey.status, 201, "\(localKey)")
        let lk = try XCTUnwrap(localKey["credential"]?.stringValue)
        let lsnap = h.call("GET", "/v1/remote-updates/live-activities/targets/\(localId)/snapshot", as: lk)
        XCTAssertEqual(lsnap["revision"]?.intValue, 1)
        let onTheWay = h.call(
            "POST", "/v1/remote-updates/live-activities/update?wait_ms=10000",
            [
                "target_id": .string(localId), "state": ["message": "On the way"], "expected_revision": lsnap["revision"] ?? 1,
                "idempotency_key": "delivery:42:update:1"
            ], as: lk)
        XCTAssertEqual(onTheWay.status, 202, "\(onTheWay)")
        XCTAssertEqual(onTheWay["operation"]?["status"]?.stringValue, "accepted", "\(onTheWay)")
        XCTAssertTrue(device.waitFor(timeout: 20) { $0.activity(localId)?.state == ["message": "On the way"] }, device.lockScreen)
        XCTAssertTrue(device.lockScreen.contains("message: On the way"), device.lockScreen)

        // Accepted state deliveries used the daily quota: start, update, and the local activity's update.
        let usage = h.call("GET", "/v1/remote-updates/usage", as: tenant.master)
        XCTAssertEqual(usage["used"]?.intValue, 3, "\(usage)")
        XCTAssertEqual(usage["reserved"]?.intValue, 0, "\(usage)")
        XCTAssertNil(device.lastError)
        if ProcessInfo.processInfo.environment["LIVERELAY_E2E_VERBOSE"] != nil { print(h.deviceOutput.text) }
    }
}
