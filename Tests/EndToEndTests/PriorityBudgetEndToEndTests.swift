import Foundation
import XCTest
import LiveRelayTestSupport
import JSON
import LiveRelayApp
import LiveRelayCore
import Locking

/// docs/priority-budget.md end to end: real PostgreSQL, the real write path and dispatcher, the
/// APNs/FCM sandbox over HTTP/2, and one injected clock shared by the API and the dispatcher so
/// the 60-minute window can slide. Each test checks the `apns-priority` the sandbox received.
final class PriorityBudgetEndToEndTests: XCTestCase {
    /// A settable clock (starts at the wall clock, moves only when told).
    final class Clock: Sendable {
        private let value = Locked<Date>(Date())
        func now() -> Date { value.withLock { $0 } }
        func advance(_ seconds: Double) { value.withLock { $0 = $0.addingTimeInterval(seconds) } }
    }

    static let appId = "com.example.delivery"
    let clock = Clock()
    var h: EndToEndHarness!

    override func setUpWithError() throws {
        let clock = self.clock
        h = try EndToEndHarness.make(clock: { clock.now() })
        try h.requireDispatcher()
    }

    override func tearDown() { h?.tearDown() }

    // MARK: helpers

    struct Setup { let tenant: EndToEndHarness.Tenant; let op: String; let device: DeviceSimulatorRunner }

    /// A tenant with sandbox credentials, the given budgets (operator PATCH) and one prepared device.
    func setUp(_ platform: DevicePlatform, priority10: Int, frequent: Int? = nil) throws -> Setup {
        let tenant = try h.tenantWithSandboxCredentials(appId: Self.appId)
        let op = try h.operatorKey()
        var patch: [String: JSONValue] = ["priority10_hourly_budget": .int(Int64(priority10))]
        if let frequent { patch["frequent_updates_hourly_budget"] = .int(Int64(frequent)) }
        let r = h.call("PATCH", "/v1/operator/tenants/\(tenant.id)", .object(patch), as: op)
        guard r.status == 200 else { throw FixtureFailure("budget PATCH failed: \(r)") }
        let device = try h.device(platform, appId: Self.appId, publishable: tenant.publishable)
        _ = try device.prepare(template: try EndToEndHarness.demoTemplate())
        return Setup(tenant: tenant, op: op, device: device)
    }

    /// A sender key covering `targets` (start target and/or target ids).
    func sender(_ s: Setup, targets: [String], createdFrom: [String] = []) throws -> String {
        let key = h.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": .array(targets.map(JSONValue.string)), "created_from": .array(createdFrom.map(JSONValue.string)),
                "permissions": ["activities:start", "activities:read-state", "activities:update", "activities:end"],
                "idempotency_key": .string(UUID().uuidString)
            ], as: s.tenant.master)
        guard let c = key["credential"]?.stringValue else { throw FixtureFailure("sender key: \(key)") }
        return c
    }

    /// A locally started target with its update token registered (ready, no push sent).
    func localTarget(_ s: Setup) throws -> String {
        let t = try s.device.localStart(
            activityType: "delivery", businessKey: "order:\(UUID().uuidString.prefix(8))",
            businessGeneration: "1", state: ["message": "Preparing"])
        guard let id = t["id"]?.stringValue else { throw FixtureFailure("local start: \(t)") }
        return id
    }

    /// An update waited for until it left `queued/sending`; returns the operation object.
    @discardableResult
    func update(
        _ key: String, _ target: String, revision: Int64, _ message: String, alert: Bool = false, priority: Int? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) -> JSONValue {
        var body: [String: JSONValue] = [
            "target_id": .string(target), "state": ["message": .string(message)],
            "expected_revision": .int(revision), "idempotency_key": .string(UUID().uuidString)
        ]
        if alert { body["alert"] = ["title": "News", "body": .string(message)] }
        if let priority { body["priority"] = .int(Int64(priority)) }
        let r = h.call("POST", "/v1/remote-updates/live-activities/update?wait_ms=10000", .object(body), as: key)
        XCTAssertEqual(r.status, 202, "\(r)", file: file, line: line)
        XCTAssertEqual(r["operation"]?["status"]?.stringValue, "accepted", "\(r)", file: file, line: line)
        return r["operation"] ?? .null
    }

    /// The `apns-priority` header of the newest APNs request the sandbox accepted for `token`.
    func lastAPNsPriority(token: String?) -> String? {
        h.sandbox.deliveries(token: token, provider: "apns").last(where: \.accepted)?.headers["apns-priority"]
    }

    func target(_ key: String, _ id: String) -> JSONValue { h.call("GET", "/v1/remote-updates/live-activities/targets/\(id)", as: key).json }

    var downgrades: Double {
        h.metrics.counter("liverelay_priority_downgrades_total", help: "", labels: []).value([])
    }

    // MARK: tests

    /// Budget 3: a remote start and two state-only updates go at 10, the next state-only update
    /// at 5 (downgraded); an alert update over the budget keeps 10 and counts; a requested 5 is
    /// sent as is and never counts; 59:59.999 after the sends they still count, at 60:00 the
    /// budget is back; an end over the budget keeps 10.
    func testBudgetNSendsNAtTenThenFiveAndReturnsAsTheWindowSlides() throws {
        let s = try setUp(.ios, priority10: 3)
        let st = try XCTUnwrap(s.device.state.templates.first?.startTargetId), tv = try XCTUnwrap(s.device.state.templates.first?.templateVersion)
        let key = try sender(s, targets: [st], createdFrom: [st])
        s.device.startBackground(interval: 0.05)
        let started = h.call(
            "POST", "/v1/remote-updates/live-activities/start?wait_ms=10000",
            [
                "start_target_id": .string(st), "template_version": .string(tv), "state": ["message": "Preparing"],
                "alert": ["title": "Order", "body": "Preparing"], "idempotency_key": "start"
            ], as: key)
        XCTAssertEqual(started["operation"]?["status"]?.stringValue, "accepted", "\(started)")
        XCTAssertEqual(started["operation"]?["priority"], 10)
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        let ready = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)?wait_until_ready_ms=30000", as: key)
        XCTAssertEqual(ready["status"]?.stringValue, "ready", "\(ready)")
        XCTAssertEqual(ready["priority10_sent_last_hour"], 1, "the start counts")
        XCTAssertEqual(ready["priority10_budget"], 3)
        let token = try XCTUnwrap(s.device.state.activity(tgt)?.updateToken)
        XCTAssertEqual(lastAPNsPriority(token: s.device.state.templates.first?.pushToStartToken), "10")

        for (i, rev) in [(1, Int64(1)), (2, 2)] {
            let op = update(key, tgt, revision: rev, "update \(i)")
            XCTAssertEqual(op["priority"], 10); XCTAssertEqual(op["requested_priority"], 10); XCTAssertEqual(op["priority_downgraded"], false)
            XCTAssertEqual(lastAPNsPriority(token: token), "10")
        }
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 3)
        XCTAssertEqual(downgrades, 0)

        // The (N+1)th priority-10 push is a state-only update: sent at 5.
        let over = update(key, tgt, revision: 3, "update 3")
        XCTAssertEqual(over["priority"], 5); XCTAssertEqual(over["requested_priority"], 10); XCTAssertEqual(over["priority_downgraded"], true)
        XCTAssertEqual(lastAPNsPriority(token: token), "5")
        let overId = try XCTUnwrap(over["id"]?.stringValue)
        XCTAssertEqual(h.call("GET", "/v1/remote-updates/operations/\(overId)", as: key).json, over, "GET shows what the write's wait showed")
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 3, "a priority-5 send does not count")
        XCTAssertEqual(downgrades, 1)

        // An alert update over the budget keeps 10 and counts; a requested 5 goes at 5, not downgraded, not counted.
        let alert = update(key, tgt, revision: 4, "alert", alert: true)
        XCTAssertEqual(alert["priority"], 10); XCTAssertEqual(alert["priority_downgraded"], false)
        XCTAssertEqual(lastAPNsPriority(token: token), "10")
        let five = update(key, tgt, revision: 5, "asked for five", priority: 5)
        XCTAssertEqual(five["priority"], 5); XCTAssertEqual(five["requested_priority"], 5); XCTAssertEqual(five["priority_downgraded"], false)
        XCTAssertEqual(lastAPNsPriority(token: token), "5")
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 4)
        XCTAssertEqual(downgrades, 1)

        // The clock stood still for every send above: 59:59.999 later they all still count.
        clock.advance(3599.999)
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 4)
        XCTAssertEqual(update(key, tgt, revision: 6, "still over")["priority"], 5)
        XCTAssertEqual(lastAPNsPriority(token: token), "5")
        // At exactly 60 minutes none counts any more: the budget is back.
        clock.advance(0.001)
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 0)
        let back = update(key, tgt, revision: 7, "budget back")
        XCTAssertEqual(back["priority"], 10); XCTAssertEqual(back["priority_downgraded"], false)
        XCTAssertEqual(lastAPNsPriority(token: token), "10")
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 1)
        XCTAssertEqual(downgrades, 2)

        // Budget 0 now: an end (with a final state) is never downgraded, and counts.
        XCTAssertEqual(h.call("PATCH", "/v1/operator/tenants/\(s.tenant.id)", ["priority10_hourly_budget": 0], as: s.op).status, 200)
        XCTAssertEqual(target(key, tgt)["priority10_budget"], 0, "the target shows the budget that applies now")
        let end = h.call(
            "POST", "/v1/remote-updates/live-activities/end?wait_ms=10000",
            [
                "target_id": .string(tgt), "state": ["message": "Delivered"], "expected_revision": 8, "idempotency_key": "end"
            ], as: key)
        XCTAssertEqual(end["operation"]?["status"]?.stringValue, "accepted", "\(end)")
        XCTAssertEqual(end["operation"]?["priority"], 10); XCTAssertEqual(end["operation"]?["priority_downgraded"], false)
        XCTAssertEqual(lastAPNsPriority(token: token), "10")
        let ended = target(key, tgt)
        XCTAssertEqual(ended["status"]?.stringValue, "ended")
        XCTAssertEqual(ended["priority10_sent_last_hour"], 2, "the end counted")
    }

    /// An installation reporting `frequent_updates: true` gets the frequent-updates budget (3
    /// here, against a priority-10 budget of 1); one that turns it off again gets the other.
    func testFrequentUpdatesInstallationsUseTheirBudget() throws {
        let s = try setUp(.ios, priority10: 1, frequent: 3)
        let installation = try XCTUnwrap(s.device.state.installationId), credential = try XCTUnwrap(s.device.state.credential)
        let patched = h.call("PATCH", "/v1/installations/\(installation)", ["frequent_updates": true], as: credential)
        XCTAssertEqual(patched["frequent_updates"], true, "\(patched)")
        let tgt = try localTarget(s)
        let key = try sender(s, targets: [tgt])
        XCTAssertEqual(target(key, tgt)["priority10_budget"], 3)
        XCTAssertEqual(target(key, tgt)["priority10_sent_last_hour"], 0, "a local start sends nothing")
        let token = try XCTUnwrap(s.device.state.activity(tgt)?.updateToken)
        for rev in Int64(1)...3 {
            XCTAssertEqual(update(key, tgt, revision: rev, "update \(rev)")["priority"], 10, "update \(rev) of 3")
            XCTAssertEqual(lastAPNsPriority(token: token), "10")
        }
        let over = update(key, tgt, revision: 4, "update 4")
        XCTAssertEqual(over["priority"], 5); XCTAssertEqual(over["priority_downgraded"], true)
        XCTAssertEqual(lastAPNsPriority(token: token), "5")

        // Back to the ordinary budget (1): still over it.
        XCTAssertEqual(h.call("PATCH", "/v1/installations/\(installation)", ["frequent_updates": false], as: credential).status, 200)
        XCTAssertEqual(target(key, tgt)["priority10_budget"], 1)
        XCTAssertEqual(update(key, tgt, revision: 5, "update 5")["priority"], 5)
    }

    /// Android targets have no budget: with budgets 0 every write goes out (FCM `android.priority`
    /// HIGH), nothing is downgraded or counted, and the target shows null for both fields.
    func testAndroidIsUnaffected() throws {
        let s = try setUp(.android, priority10: 0, frequent: 0)
        let tgt = try localTarget(s)
        let key = try sender(s, targets: [tgt])
        for rev in Int64(1)...3 {
            let op = update(key, tgt, revision: rev, "update \(rev)")
            XCTAssertEqual(op["priority"], 10); XCTAssertEqual(op["requested_priority"], 10); XCTAssertEqual(op["priority_downgraded"], false)
        }
        let fcm = h.sandbox.deliveries(token: s.device.state.fcmToken, provider: "fcm").filter(\.accepted)
        XCTAssertEqual(fcm.count, 3)
        XCTAssertEqual(fcm.last?.payload["message"]?["android"]?["priority"]?.stringValue, "HIGH")
        let t = target(key, tgt)
        XCTAssertEqual(t["priority10_sent_last_hour"], .null)
        XCTAssertEqual(t["priority10_budget"], .null)
        XCTAssertEqual(downgrades, 0)
        XCTAssertEqual(
            try h.db.system { c in
                try c.query("SELECT COALESCE(max(cardinality(priority10_sends)), 0) AS n FROM target_clocks WHERE target_id = $1", [tgt])[0].int("n")
            }, 0, "nothing counted")
    }
}
