import Foundation
import XCTest
import LiveRelayTestSupport
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelaySandbox

/// The README section "Broadcast to many phones" against the real API, dispatcher, channel
/// worker and the sandbox over HTTP/2 + TLS (docs/channels.md): an iOS 18 phone (served by one
/// APNs broadcast per write), an iOS 17 phone and an Android phone (served by fan-out) join one
/// channel; channel updates reach all three; the end ends every member and deletes the APNs channel.
final class ChannelEndToEndTests: EndToEndTestCase {

    static let appId = "com.example.delivery"

    func testBroadcastToManyPhones() throws {
        try h.requireDispatcher()
        let h = h!
        let tenant = try h.tenantWithSandboxCredentials(appId: Self.appId)
        let template = try EndToEndHarness.demoTemplate()
        // Three phones prepare the demo template.
        let phones = [
            try h.device(.ios, appId: Self.appId, publishable: tenant.publishable, osVersion: "18.2", name: "ios18"),
            try h.device(.ios, appId: Self.appId, publishable: tenant.publishable, osVersion: "17.5", name: "ios17"),
            try h.device(.android, appId: Self.appId, publishable: tenant.publishable, name: "android")
        ]
        var starts: [(st: String, tv: String)] = []
        for p in phones {
            let prepared = try p.prepare(template: template)
            starts.append((try XCTUnwrap(prepared["start_target_id"]?.stringValue), try XCTUnwrap(prepared["template_version"]?.stringValue)))
            p.startBackground(interval: 0.05)
        }

        // 1. The channel (master key): LiveRelay makes the APNs channel first.
        let created = h.call(
            "POST", "/v1/remote-updates/channels",
            [
                "app_id": .string(Self.appId), "environment": "sandbox", "activity_type": "delivery", "attributes_type": "DeliveryAttributes",
                "schema": template["schema"] ?? .null, "label": "match 42", "idempotency_key": "channel-match-42"
            ], as: tenant.master)
        XCTAssertEqual(created.status, 201, "\(created)")
        let ch = try XCTUnwrap(created["id"]?.stringValue)
        let apnsChannel = try XCTUnwrap(created["apns_channel_id"]?.stringValue)
        XCTAssertEqual(h.sandbox.channels(bundleId: Self.appId).map(\.id), [apnsChannel], "the sandbox holds the APNs channel")

        // 2. A sender key naming the start targets and the channel.
        let key = h.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": .array((starts.map(\.st) + [ch]).map(JSONValue.string)), "created_from": .array(starts.map { .string($0.st) }),
                "permissions": ["activities:start", "activities:read-state", "activities:update", "activities:end"],
                "idempotency_key": "channel-sender"
            ], as: tenant.master)
        XCTAssertEqual(key.status, 201, "\(key)")
        let sender = try XCTUnwrap(key["credential"]?.stringValue)

        // 3. Each phone's activity joins the channel with its start.
        var targets: [String] = []
        for (i, s) in starts.enumerated() {
            let r = h.call(
                "POST", "/v1/remote-updates/live-activities/start",
                [
                    "start_target_id": .string(s.st), "template_version": .string(s.tv), "state": ["message": "Warm-up"],
                    "alert": ["title": "Match 42", "body": "Kick-off soon"], "channel_id": .string(ch),
                    "idempotency_key": .string("match-42-start-\(i)")
                ], as: sender)
            XCTAssertEqual(r.status, 202, "\(r)")
            XCTAssertEqual(r["target"]?["delivery"]?.stringValue, i == 0 ? "broadcast" : "fanout", "\(r)")
            targets.append(try XCTUnwrap(r["target"]?["id"]?.stringValue))
        }
        for t in targets {
            let ready = h.call("GET", "/v1/remote-updates/live-activities/targets/\(t)?wait_until_ready_ms=30000", as: sender)
            XCTAssertEqual(ready["status"]?.stringValue, "ready", "\(ready)")
        }
        let startPush = h.sandbox.deliveries(provider: "apns").first { $0.payload["aps"]?["input-push-channel"]?.stringValue == apnsChannel }
        XCTAssertNotNil(startPush, "the iOS 18 start carries input-push-channel")

        // 4. Channel updates: one broadcast per write, fan-out to the other two.
        var revision: Int64 = 0
        let claimedAtFanout = h.metrics.counter("liverelay_dispatch_claimed_at_fanout_total", help: "", labels: [])
        var claimedBefore = 0.0
        for (i, message) in ["Kick-off", "Goal! 1-0", "Half-time 1-0"].enumerated() {
            if i == 1 { claimedBefore = claimedAtFanout.value([]) }
            var body: [String: JSONValue] = [
                "state": ["message": .string(message)], "expected_revision": .int(revision),
                "idempotency_key": .string("match-42-update-\(i)")
            ]
            if i == 1 { body["alert"] = ["title": "Goal", "body": "1-0"] }
            let r = h.call("POST", "/v1/remote-updates/channels/\(ch)/update", .object(body), as: sender)
            XCTAssertEqual(r.status, 202, "\(r)")
            revision += 1
            let cop = try XCTUnwrap(r["channel_operation"]?["id"]?.stringValue)
            eventually("channel write \(i) is delivered", within: 30) {
                let o = h.call("GET", "/v1/remote-updates/channel-operations/\(cop)", as: sender)
                return o["status"]?.stringValue == "accepted" && o["fanout"]?["accepted"]?.intValue == 2
            }
            let o = h.call("GET", "/v1/remote-updates/channel-operations/\(cop)", as: sender)
            XCTAssertNotNil(o["broadcast"]?["apns_unique_id"]?.stringValue, "\(o)")
        }
        let broadcasts = h.sandbox.broadcasts(channelId: apnsChannel)
        XCTAssertEqual(broadcasts.count, 3, "exactly one broadcast request per channel write")
        // Writes 1 and 2 found both fan-out members idle (the previous write was accepted), so
        // the expander put each push in flight itself and handed it to the dispatcher
        // (docs/delivery.md "Claims at fan-out"). Write 0 may have found a start still in flight.
        XCTAssertEqual(claimedAtFanout.value([]) - claimedBefore, 4, "2 writes x 2 fan-out members, each claimed by the expander")
        for (p, t) in zip(phones.dropFirst(), targets.dropFirst()) {
            XCTAssertTrue(p.waitFor(timeout: 20) { $0.activity(t)?.state == ["message": "Half-time 1-0"] }, "\(p.lockScreen)")
        }
        let snap = h.call("GET", "/v1/remote-updates/channels/\(ch)/snapshot", as: sender)
        XCTAssertEqual(snap["state"], ["message": "Half-time 1-0"])
        XCTAssertEqual(snap["revision"]?.intValue, 3)
        // Members are driven by their channel only.
        let direct = h.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(targets[1]), "state": ["message": "x"], "expected_revision": 4, "idempotency_key": "direct"
            ], as: sender)
        XCTAssertEqual(direct.errorCode, "TARGET_ON_CHANNEL", "\(direct)")

        // 5. The end ends every member, then the APNs channel is deleted.
        let end = h.call(
            "POST", "/v1/remote-updates/channels/\(ch)/end",
            [
                "state": ["message": "Full time 2-1"], "expected_revision": .int(revision), "idempotency_key": "match-42-end"
            ], as: sender)
        XCTAssertEqual(end.status, 202, "\(end)")
        eventually("the channel is ended", within: 30) {
            h.call("GET", "/v1/remote-updates/channels/\(ch)", as: sender)["status"]?.stringValue == "ended"
        }
        eventually("every member is ended", within: 30) {
            targets.allSatisfy { h.call("GET", "/v1/remote-updates/live-activities/targets/\($0)", as: sender)["status"]?.stringValue == "ended" }
        }
        XCTAssertTrue(h.sandbox.channels(bundleId: Self.appId).isEmpty, "the APNs channel is deleted")
        XCTAssertEqual(
            h.call(
                "POST", "/v1/remote-updates/channels/\(ch)/update",
                [
                    "state": ["message": "late"], "expected_revision": 4, "idempotency_key": "late"
                ], as: sender
            ).errorCode, "CHANNEL_ENDED")
    }
}
