import Foundation
import XCTest
import JSON
@testable import LiveRelayApp
import LiveRelayCore

/// The simulator's pure core: applying pushes, ordering by timestamp, schema checks, dismissal
/// and the lock screen text. No I/O.
final class DeviceSimulatorTests: XCTestCase {
    static let schema: JSONValue = [
        "type": "object", "required": ["message"],
        "properties": ["message": ["type": "string", "minLength": 1], "eta_minutes": ["type": "integer"]],
        "additionalProperties": false
    ]
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let p2s = "aa11"

    func iosDevice() -> DeviceSimulator {
        var s = DeviceSimulatorState(platform: .ios, appId: "com.example.delivery", apiURL: "http://api", sandboxURL: "http://sb")
        s.prepared(
            SimulatedTemplate(
                startTargetId: "st_1", templateVersion: "tv_1", bindingId: "b", activityType: "delivery",
                attributesType: "DeliveryAttributes", schema: Self.schema, pushToStartToken: p2s))
        return DeviceSimulator(state: s)
    }

    func androidDevice() -> DeviceSimulator {
        var s = DeviceSimulatorState(
            platform: .android, appId: "com.example.delivery", apiURL: "http://api", sandboxURL: "http://sb",
            fcmToken: "fcm:tok")
        s.prepared(
            SimulatedTemplate(
                startTargetId: "st_1", templateVersion: "tv_1", bindingId: "b", activityType: "delivery",
                attributesType: "DeliveryAttributes", schema: Self.schema, pushToStartToken: nil))
        return DeviceSimulator(state: s)
    }

    func aps(_ seq: Int, token: String, event: String, ts: Int64, state: JSONValue, extra: [String: JSONValue] = [:]) -> DevicePush {
        var aps: [String: JSONValue] = ["event": .string(event), "timestamp": .int(ts), "content-state": state]
        for (k, v) in extra { aps[k] = v }
        return DevicePush(sequence: seq, provider: "apns", token: token, payload: ["aps": .object(aps)])
    }

    func startPush(_ seq: Int = 1, ts: Int64 = 1_800_000_000, state: JSONValue = ["message": "Preparing"], tv: String = "tv_1") -> DevicePush {
        aps(
            seq, token: p2s, event: "start", ts: ts, state: state,
            extra: [
                "attributes-type": "DeliveryAttributes", "attributes": ["target_id": "tgt_1", "template_version": .string(tv)],
                "alert": ["title": "Preparing", "body": "Your order is being prepared"], "input-push-token": 1
            ])
    }

    func testRemoteStartCreatesTheActivityAndAsksForAnUpdateToken() {
        var d = iosDevice()
        let ev = d.apply(startPush(), now: now, newToken: { "bb22" })
        XCTAssertEqual(ev.kind, .started)
        XCTAssertEqual(ev.targetId, "tgt_1")
        XCTAssertEqual(ev.registerUpdateToken, "bb22")
        let a = try! XCTUnwrap(d.state.activity("tgt_1"))
        XCTAssertEqual(a.state, ["message": "Preparing"])
        XCTAssertEqual(a.updateToken, "bb22")
        XCTAssertEqual(a.alert, DeviceAlert(title: "Preparing", body: "Your order is being prepared"))
        XCTAssertNil(a.placeholder)
        XCTAssertTrue(d.watchedTokens.contains { $0.token == "bb22" })
        let box = LockScreen.render(a, now: now)
        XCTAssertTrue(box.contains("message: Preparing"), box)
        XCTAssertTrue(box.contains("! Preparing: Your order is being prepared"), box)
        XCTAssertTrue(box.hasPrefix("+-"), box)
        // The same start again (a resend) does not make a second activity.
        XCTAssertEqual(d.apply(startPush(2), now: now, newToken: { "cc33" }).kind, .ignored)
        XCTAssertEqual(d.state.activities.count, 1)
    }

    func testUpdatesApplyOnlyWithNewerTimestampAndValidState() {
        var d = iosDevice()
        _ = d.apply(startPush(ts: 100), now: now, newToken: { "bb22" })
        var ev = d.apply(aps(2, token: "bb22", event: "update", ts: 100, state: ["message": "same second"]), now: now, newToken: { "x" })
        XCTAssertEqual(ev.kind, .ignored, "not newer")
        ev = d.apply(aps(3, token: "bb22", event: "update", ts: 102, state: ["message": "Updated from server"]), now: now, newToken: { "x" })
        XCTAssertEqual(ev.kind, .updated)
        XCTAssertNil(d.state.activity("tgt_1")?.alert, "an update without alert shows no banner")
        ev = d.apply(aps(4, token: "bb22", event: "update", ts: 101, state: ["message": "late"]), now: now, newToken: { "x" })
        XCTAssertEqual(ev.kind, .ignored, "older than the last applied")
        XCTAssertEqual(d.state.activity("tgt_1")?.state, ["message": "Updated from server"])
        // A state the pinned schema refuses is not applied; the lock screen shows a placeholder.
        ev = d.apply(aps(5, token: "bb22", event: "update", ts: 103, state: ["message": "x", "extra": 1]), now: now, newToken: { "x" })
        XCTAssertEqual(ev.kind, .updated)
        XCTAssertNotNil(ev.reason)
        let a = d.state.activity("tgt_1")!
        XCTAssertEqual(a.state, ["message": "Updated from server"])
        XCTAssertTrue(LockScreen.render(a, now: now).contains("[placeholder]"))
        // The next valid state clears it.
        _ = d.apply(aps(6, token: "bb22", event: "update", ts: 104, state: ["message": "ok", "eta_minutes": 5]), now: now, newToken: { "x" })
        XCTAssertNil(d.state.activity("tgt_1")?.placeholder)
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_1")!, now: now).contains("eta_minutes: 5"))
    }

    func testEndHonoursTheDismissalDate() {
        var d = iosDevice()
        _ = d.apply(startPush(ts: 100), now: now, newToken: { "bb22" })
        let nowS = Int64(now.timeIntervalSince1970)
        // Dismissal in 60 s: ended, still shown; removed once the date passes.
        let ev = d.apply(
            aps(2, token: "bb22", event: "end", ts: 200, state: ["message": "Delivered"], extra: ["dismissal-date": .int(nowS + 60)]),
            now: now, newToken: { "x" })
        XCTAssertEqual(ev.kind, .ended)
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_1")!, now: now).contains("Ended"))
        XCTAssertEqual(
            d.apply(aps(3, token: "bb22", event: "update", ts: 300, state: ["message": "after end"]), now: now, newToken: { "x" }).kind,
            .ignored)
        XCTAssertFalse(d.watchedTokens.contains { $0.token == "bb22" }, "an ended activity's token is no longer read")
        XCTAssertEqual(d.tick(now: now.addingTimeInterval(30)).count, 0)
        XCTAssertEqual(d.tick(now: now.addingTimeInterval(61)).map(\.kind), [.dismissed])
        XCTAssertEqual(LockScreen.screen(d.state, now: now), "(lock screen: no live activities)")

        // Dismissal now: removed at once. No dismissal date: the 4 h default.
        var e = iosDevice()
        _ = e.apply(startPush(ts: 100), now: now, newToken: { "bb22" })
        XCTAssertEqual(
            e.apply(
                aps(2, token: "bb22", event: "end", ts: 200, state: ["message": "x"], extra: ["dismissal-date": .int(nowS)]),
                now: now, newToken: { "x" }
            ).kind, .dismissed)
        var f = iosDevice()
        _ = f.apply(startPush(ts: 100), now: now, newToken: { "bb22" })
        _ = f.apply(aps(2, token: "bb22", event: "end", ts: 200, state: ["message": "x"]), now: now, newToken: { "x" })
        XCTAssertEqual(f.state.activity("tgt_1")?.dismissAt, 200 + 4 * 3600)
    }

    func testStartWithUnpreparedTemplateOrWrongTokenUse() {
        var d = iosDevice()
        let ev = d.apply(startPush(tv: "tv_other"), now: now, newToken: { "bb22" })
        XCTAssertEqual(ev.kind, .started)
        XCTAssertTrue(ev.reason?.contains("not prepared") ?? false)
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_1")!, now: now).contains("[placeholder]"))
        var e = iosDevice()
        XCTAssertEqual(e.apply(aps(1, token: p2s, event: "update", ts: 1, state: ["message": "x"]), now: now, newToken: { "x" }).kind, .ignored)
        XCTAssertEqual(
            e.apply(aps(2, token: "unknown", event: "update", ts: 1, state: ["message": "x"]), now: now, newToken: { "x" }).kind,
            .ignored)
    }

    func fcm(_ seq: Int, event: String, ts: Int64, state: JSONValue, extra: [String: String] = [:]) -> DevicePush {
        var data: [String: JSONValue] = [
            "target_id": "tgt_a", "event": .string(event), "revision": "1", "timestamp": .string(String(ts)),
            "state": .string(state.jsonString), "template_version": "tv_1"
        ]
        for (k, v) in extra { data[k] = .string(v) }
        return DevicePush(
            sequence: seq, provider: "fcm", token: "fcm:tok",
            payload: ["message": ["token": "fcm:tok", "data": .object(data), "android": ["priority": "HIGH", "ttl": "3600s"]]])
    }

    func testAndroidDataMessages() {
        var d = androidDevice()
        XCTAssertEqual(d.watchedTokens.map(\.token), ["fcm:tok"])
        let ev = d.apply(
            fcm(1, event: "start", ts: 100, state: ["message": "Preparing"], extra: ["alert_title": "Preparing", "alert_body": "b"]),
            now: now,
            newToken: {
                XCTFail("no per-activity token on Android"); return "x"
            })
        XCTAssertEqual(ev.kind, .started)
        XCTAssertNil(ev.registerUpdateToken)
        XCTAssertEqual(
            d.apply(
                fcm(2, event: "update", ts: 101, state: ["message": "Updated from server"], extra: ["revision": "2"]),
                now: now, newToken: { "x" }
            ).kind, .updated)
        XCTAssertEqual(d.state.activity("tgt_a")?.revision, 2)
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_a")!, now: now).contains("revision 2"))
        let nowS = Int64(now.timeIntervalSince1970)
        XCTAssertEqual(
            d.apply(
                fcm(3, event: "end", ts: 102, state: ["message": "Done"], extra: ["dismiss_at": String(nowS)]),
                now: now, newToken: { "x" }
            ).kind, .dismissed)
        // Another device's token is ignored.
        var other = fcm(4, event: "start", ts: 1, state: ["message": "x"])
        other.token = "someone-else"
        XCTAssertEqual(d.apply(other, now: now, newToken: { "x" }).kind, .ignored)
    }

    func testPendingOrdersBySequenceAfterEachTokenCursor() {
        let p = [
            DevicePush(sequence: 7, provider: "apns", token: "a", payload: .null),
            DevicePush(sequence: 3, provider: "apns", token: "b", payload: .null),
            DevicePush(sequence: 5, provider: "apns", token: "a", payload: .null),
            DevicePush(sequence: 2, provider: "apns", token: "a", payload: .null)
        ]
        XCTAssertEqual(DeviceSimulator.pending(p, cursors: ["a": 4]).map(\.sequence), [3, 5, 7])
    }

    func testCursorsOfAnotherSandboxRunAreDropped() {
        let c = ["a": 7, "b": 3]
        XCTAssertEqual(DeviceSimulator.cursors(c, recordedRun: "r1", currentRun: "r1").cursors, c)
        XCTAssertFalse(DeviceSimulator.cursors(c, recordedRun: "r1", currentRun: "r1").restarted)
        let restarted = DeviceSimulator.cursors(c, recordedRun: "r1", currentRun: "r2")
        XCTAssertEqual(restarted.cursors, [:], "a restarted sandbox numbers from 1 again")
        XCTAssertTrue(restarted.restarted)
        XCTAssertEqual(DeviceSimulator.cursors(c, recordedRun: nil, currentRun: "r2").cursors, c, "an old state file adopts the run")
        XCTAssertEqual(DeviceSimulator.cursors(c, recordedRun: "r1", currentRun: nil).cursors, c, "a sandbox without run ids")
        // After the reset, the new run's first pushes are pending again.
        let p = [DevicePush(sequence: 1, provider: "apns", token: "a", payload: .null)]
        XCTAssertEqual(DeviceSimulator.pending(p, cursors: restarted.cursors).map(\.sequence), [1])
        XCTAssertEqual(DeviceSimulator.pending(p, cursors: c).map(\.sequence), [], "what the phone did before the fix")
    }

    func testLocalStartAndStateFileRoundTrip() throws {
        var d = iosDevice()
        let ev = d.localStart(
            targetId: "tgt_l", activityType: "delivery", templateVersion: "tv_1", businessKey: "delivery:42",
            state: ["message": "Preparing"], now: now, updateToken: "dd44")
        XCTAssertEqual(ev.registerUpdateToken, "dd44")
        _ = d.apply(aps(1, token: "dd44", event: "update", ts: 5, state: ["message": "On the way"]), now: now, newToken: { "x" })
        XCTAssertEqual(d.state.activity("tgt_l")?.state, ["message": "On the way"], "the first push after a local start applies")
        d.state.cursors["dd44"] = 1
        let back = try DeviceSimulatorState(json: try JSONValue.parse(d.state.json.jsonString))
        XCTAssertEqual(back, d.state)
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_l")!, now: now).contains("(local)"))
    }

    func broadcast(_ seq: Int, channel: String, event: String, ts: Int64, state: JSONValue, extra: [String: JSONValue] = [:]) -> DevicePush {
        var aps: [String: JSONValue] = ["event": .string(event), "timestamp": .int(ts), "content-state": state]
        for (k, v) in extra { aps[k] = v }
        return DevicePush(sequence: seq, provider: "broadcast", token: channel, payload: ["aps": .object(aps)])
    }

    /// iOS 18: a start with `input-push-channel` subscribes the activity; broadcasts of that
    /// channel then drive it like updates on its own token (Apple "Sending broadcast push
    /// notification requests to APNs").
    func testChannelStartSubscribesAndBroadcastsDriveTheLockScreen() throws {
        var d = iosDevice()
        let start = aps(
            1, token: p2s, event: "start", ts: 100, state: ["message": "Kick-off"],
            extra: [
                "attributes-type": "DeliveryAttributes", "attributes": ["target_id": "tgt_1", "template_version": "tv_1"],
                "alert": ["title": "Match", "body": "Kick-off"], "input-push-channel": "Y2hhbm5lbA=="
            ])
        let ev = d.apply(
            start, now: now,
            newToken: {
                XCTFail("a channel activity gets no update token"); return "x"
            })
        XCTAssertEqual(ev.kind, .started)
        XCTAssertNil(ev.registerUpdateToken)
        XCTAssertEqual(d.state.activity("tgt_1")?.channelId, "Y2hhbm5lbA==")
        XCTAssertNil(d.state.activity("tgt_1")?.updateToken)
        XCTAssertTrue(d.watchedTokens.contains { $0.provider == "broadcast" && $0.token == "Y2hhbm5lbA==" })
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_1")!, now: now).contains("(remote, channel)"))
        // Applies a broadcast (`broadcast(…)`) to `d`; new tokens are never asked for here.
        func applyBroadcast(_ seq: Int, channel: String, event: String, ts: Int64, state: JSONValue) -> DeviceEvent {
            d.apply(broadcast(seq, channel: channel, event: event, ts: ts, state: state), now: now, newToken: { "x" })
        }

        XCTAssertEqual(applyBroadcast(2, channel: "Y2hhbm5lbA==", event: "update", ts: 101, state: ["message": "1-0"]).kind, .updated)
        XCTAssertEqual(d.state.activity("tgt_1")?.state, ["message": "1-0"])
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_1")!, now: now).contains("message: 1-0"))
        // Same rules as token pushes: older timestamps and invalid states do not apply.
        XCTAssertEqual(applyBroadcast(3, channel: "Y2hhbm5lbA==", event: "update", ts: 101, state: ["message": "late"]).kind, .ignored)
        let bad = applyBroadcast(4, channel: "Y2hhbm5lbA==", event: "update", ts: 102, state: ["message": 7])
        XCTAssertEqual(bad.kind, .updated)
        XCTAssertNotNil(d.state.activity("tgt_1")?.placeholder)
        // Another channel, or a broadcast that tries to start: ignored.
        XCTAssertEqual(applyBroadcast(5, channel: "b3RoZXI=", event: "update", ts: 103, state: ["message": "x"]).kind, .ignored)
        XCTAssertEqual(applyBroadcast(6, channel: "Y2hhbm5lbA==", event: "start", ts: 104, state: ["message": "x"]).kind, .ignored)
        // The end broadcast ends it and honours the dismissal date; then the channel is no longer read.
        let end = d.apply(
            broadcast(
                7, channel: "Y2hhbm5lbA==", event: "end", ts: 105, state: ["message": "2-1 final"],
                extra: ["dismissal-date": .int(Int64(now.timeIntervalSince1970))]), now: now, newToken: { "x" })
        XCTAssertEqual(end.kind, .dismissed)
        XCTAssertEqual(d.state.activity("tgt_1")?.state, ["message": "2-1 final"])
        XCTAssertFalse(d.watchedTokens.contains { $0.provider == "broadcast" })
    }

    func testLocalChannelStartAndAndroidIgnoresBroadcasts() throws {
        var d = iosDevice()
        let ev = d.localStart(
            targetId: "tgt_c", activityType: "delivery", templateVersion: "tv_1", businessKey: "match:9",
            state: ["message": "Soon"], now: now, updateToken: "ee55", channelId: "Y2g=")
        XCTAssertNil(ev.registerUpdateToken, "pushType .channel: no update token")
        XCTAssertEqual(
            d.apply(
                broadcast(1, channel: "Y2g=", event: "update", ts: 1, state: ["message": "Now"]), now: now,
                newToken: { "x" }
            ).kind, .updated)
        d.state.osVersion = "18.2"
        let back = try DeviceSimulatorState(json: try JSONValue.parse(d.state.json.jsonString))
        XCTAssertEqual(back, d.state)
        XCTAssertEqual(back.activity("tgt_c")?.channelId, "Y2g=")
        XCTAssertTrue(LockScreen.render(d.state.activity("tgt_c")!, now: now).contains("(local, channel)"))
        var a = androidDevice()
        XCTAssertEqual(
            a.apply(
                broadcast(1, channel: "Y2g=", event: "update", ts: 1, state: ["message": "Now"]), now: now,
                newToken: { "x" }
            ).kind, .ignored)
    }
}
