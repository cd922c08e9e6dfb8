import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import Delivery
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import LiveRelayTestSupport

/// Events and webhooks end to end (docs/webhooks.md): the README tour's changes on a simulated
/// iOS device, through the real dispatcher and the APNs sandbox, each produce exactly the event
/// types that name them; every event reaches a real HTTPS receiver (sandbox CA) with a
/// signature the README's Python receiver verifies.
final class WebhookEventTests: XCTestCase {
    var h: EndToEndHarness!
    var receiver: WebhookReceiver!
    var worker: WebhookWorker?
    static let appId = "com.example.deliveries"

    override func setUpWithError() throws {
        h = try EndToEndHarness.make()
        receiver = try WebhookReceiver(ca: h.sandbox.ca)
    }

    override func tearDown() {
        worker?.stop(timeoutSeconds: 5)
        receiver?.stop()
        h?.tearDown()
    }

    func startWorker() throws {
        let client = try WebhookHTTPClient(configuration: WebhookHTTPConfiguration(allowPrivate: true, extraCAFile: h.sandbox.files["ca.pem"]))
        let w = WebhookWorker(
            db: h.db, kek: h.kek, client: client, configuration: WebhookWorkerConfiguration(workerId: "test-webhooks"),
            metrics: h.metrics, log: Logger(minimum: .warning))
        w.start()
        worker = w
    }

    /// Every event of the tenant, oldest first.
    func events(_ master: String) -> [JSONValue] {
        let r = h.call("GET", "/v1/events?limit=200", as: master)
        XCTAssertEqual(r.status, 200, "\(r)")
        return (r["data"]?.arrayValue ?? []).reversed()
    }

    /// The types of the events that appeared since `seen` events, sorted.
    func newTypes(_ master: String, after seen: inout Int) -> [String] {
        let all = events(master)
        defer { seen = all.count }
        return all.dropFirst(seen).compactMap { $0["type"]?.stringValue }.sorted()
    }

    func waitForNewTypes(_ master: String, after seen: inout Int, count: Int, file: StaticString = #filePath, line: UInt = #line) -> [String] {
        eventually("\(count) new events", file: file, line: line) { events(master).count >= seen + count }
        Thread.sleep(forTimeInterval: 0.3)  // anything extra the change made would be in the same commit; let late ones show
        return newTypes(master, after: &seen)
    }

    func testEveryEventTypeOfTheTourComesFromTheChangeItNamesAndReachesTheReceiverSigned() throws {
        try h.requireDispatcher()
        try startWorker()
        let tenant = try h.tenantWithSandboxCredentials(appId: Self.appId)
        _ = try h.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 2 WHERE tenant_id = $1", [tenant.id]) }
        let created = h.call(
            "POST", "/v1/webhook-endpoints",
            [
                "url": .string(receiver.url()), "events": ["*"],
                "idempotency_key": "hook-1"
            ], as: tenant.master)
        XCTAssertEqual(created.status, 201, "\(created)")
        let secret = try XCTUnwrap(created["secret"]?.stringValue)
        XCTAssertTrue(secret.hasPrefix("whsec_"))
        try receiver.setSecrets([secret])
        var seen = 0
        XCTAssertEqual(newTypes(tenant.master, after: &seen), [], "creating an endpoint is no event")

        // Registration and prepare: the simulator registers its push-to-start token → start_target.ready.
        let device = try h.device(.ios, appId: Self.appId, publishable: tenant.publishable)
        XCTAssertEqual(newTypes(tenant.master, after: &seen), [], "registering an installation is no event")
        let prepared = try device.prepare(template: try EndToEndHarness.demoTemplate())
        let st = try XCTUnwrap(prepared["start_target_id"]?.stringValue)
        let tv = try XCTUnwrap(prepared["template_version"]?.stringValue)
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 1), ["start_target.ready"])
        device.startBackground(interval: 0.05)

        // Start → accepted by APNs, then the device registers its update token → target.ready.
        let started = h.startPreparing(startTarget: st, templateVersion: tv, idempotencyKey: "start-1", as: tenant.master)
        // A master key cannot start (docs/credentials.md): use a sender key.
        XCTAssertEqual(started.status, 403, "\(started)")
        let sender = try h.senderKey(startTarget: st, idempotencyKey: "sk-1", as: tenant.master)
        let start = h.startPreparing(startTarget: st, templateVersion: tv, idempotencyKey: "start-1", as: sender)
        XCTAssertEqual(start.status, 202, "\(start)")
        let tgt = try XCTUnwrap(start["target"]?["id"]?.stringValue)
        let startOp = try XCTUnwrap(start["operation"]?["id"]?.stringValue)
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 2), ["operation.accepted", "target.ready"])

        // An update takes the last unit of the day's quota (2) → operation.accepted + quota.exhausted.
        let up = h.call(
            "POST", "/v1/remote-updates/live-activities/update?wait_ms=10000",
            [
                "target_id": .string(tgt), "state": ["message": "On the way"], "expected_revision": 1, "idempotency_key": "up-1"
            ], as: sender)
        XCTAssertEqual(up.status, 202, "\(up)")
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 2), ["operation.accepted", "quota.exhausted"])
        let refused = h.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(tgt), "state": ["message": "x"], "expected_revision": 2, "idempotency_key": "up-2"
            ], as: sender)
        XCTAssertEqual(refused.errorCode, "QUOTA_EXCEEDED", "\(refused)")
        XCTAssertEqual(newTypes(tenant.master, after: &seen), [], "a refused write is no event (and quota.exhausted comes once a day)")

        // APNs refuses the next update (413) → operation.failed.
        _ = try h.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 1000 WHERE tenant_id = $1", [tenant.id]) }
        _ = try sandboxFault(["provider": "apns", "status": 413, "reason": "PayloadTooLarge", "times": 1])
        let up3 = h.call(
            "POST", "/v1/remote-updates/live-activities/update?wait_ms=10000",
            [
                "target_id": .string(tgt), "state": ["message": "Almost there"], "expected_revision": 2, "idempotency_key": "up-3"
            ], as: sender)
        XCTAssertEqual(up3.status, 202, "\(up3)")
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 1), ["operation.failed"])

        // A stateless end → operation.accepted + target.ended (end_reason sender).
        let end = h.call(
            "POST", "/v1/remote-updates/live-activities/end?wait_ms=10000",
            [
                "target_id": .string(tgt), "idempotency_key": "end-1"
            ], as: sender)
        XCTAssertEqual(end.status, 202, "\(end)")
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 2), ["operation.accepted", "target.ended"])
        let all = events(tenant.master)
        let ended = try XCTUnwrap(all.last(where: { $0["type"]?.stringValue == "target.ended" }))
        XCTAssertEqual(ended["data"]?["object"]?["end_reason"]?.stringValue, "sender")
        XCTAssertNil(ended["data"]?["object"]?["state"], "events never carry business state")
        // The event's object is the API's object (same encoder fields and values).
        let targetNow = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)", as: sender)
        XCTAssertEqual(ended["data"]?["object"], targetNow.json, "target.ended carries the target as the API shows it")
        let accepted = try XCTUnwrap(all.first(where: { $0["type"]?.stringValue == "operation.accepted" }))
        let opNow = h.call("GET", "/v1/remote-updates/operations/\(startOp)", as: sender)
        XCTAssertEqual(accepted["data"]?["object"], opNow.json, "operation.accepted carries the operation as the API shows it")

        // The filters.
        let byTarget = h.call("GET", "/v1/events?target_id=\(tgt)", as: tenant.master)
        XCTAssertEqual(
            Set((byTarget["data"]?.arrayValue ?? []).compactMap { $0["type"]?.stringValue }),
            ["operation.accepted", "operation.failed", "target.ready", "target.ended"])
        let byType = h.call("GET", "/v1/events?type=operation.failed", as: tenant.master)
        XCTAssertEqual(byType["data"]?.arrayValue?.count, 1)

        // Disconnect → installation.retired, and nothing else (the target already ended; the
        // start target retires, which is no event).
        var ins: (String, String)?
        _ = device.waitFor(timeout: 1) { s in
            ins = (s.installationId ?? "", s.credential ?? ""); return true
        }
        device.stop()
        let (insId, insCred) = try XCTUnwrap(ins)
        let gone = h.call("POST", "/v1/installations/\(insId)/disconnect", [:], as: insCred)
        XCTAssertEqual(gone.status, 200, "\(gone)")
        XCTAssertEqual(waitForNewTypes(tenant.master, after: &seen, count: 1), ["installation.retired"])

        // Every event reached the receiver, signed with the endpoint's secret, with the headers.
        let ids = Set(events(tenant.master).compactMap { $0["id"]?.stringValue })
        XCTAssertEqual(ids.count, 9)
        eventually("every event delivered") { Set(receiver.requests().compactMap { $0["event_id"]?.stringValue }).isSuperset(of: ids) }
        for r in receiver.requests() {
            XCTAssertEqual(r["verified"], true, "the README receiver verifies \(r)")
            XCTAssertEqual(r["content_type"]?.stringValue, "application/json")
            XCTAssertTrue(r["user_agent"]?.stringValue?.hasPrefix("LiveRelay/") ?? false, "\(r)")
            let body = try JSONValue.parse(r["body"]?.stringValue ?? "")
            XCTAssertEqual(body["id"]?.stringValue, r["event_id"]?.stringValue)
            XCTAssertEqual(body["object"]?.stringValue, "event")
            XCTAssertEqual(body, h.call("GET", "/v1/events/\(body["id"]?.stringValue ?? "")", as: tenant.master).json)
        }
        let log = h.call("GET", "/v1/webhook-endpoints/\(created["id"]?.stringValue ?? "")/deliveries?limit=200", as: tenant.master)
        XCTAssertEqual(Set((log["data"]?.arrayValue ?? []).compactMap { $0["event_id"]?.stringValue }), ids)
        XCTAssertTrue((log["data"]?.arrayValue ?? []).allSatisfy { $0["status_code"]?.intValue == 200 && $0["error"] == .null })
        XCTAssertTrue(h.metrics.render().contains("liverelay_webhook_deliveries_total{result=\"delivered\"} "), h.metrics.render())
        XCTAssertTrue(h.metrics.render().contains("liverelay_webhook_delivery_lag_seconds_count"))
    }

    /// Adds a sandbox fault (`POST /sandbox/faults`).
    func sandboxFault(_ body: JSONValue) throws -> JSONValue {
        var req = URLRequest(url: URL(string: h.sandbox.controlURL + "/sandbox/faults")!)
        req.httpMethod = "POST"
        req.httpBody = Data(body.serialized())
        let done = DispatchSemaphore(value: 0)
        let out = LineCapture()
        URLSession.shared.dataTask(with: req) { d, _, _ in
            out.append(String(decoding: d ?? Data(), as: UTF8.self)); done.signal()
        }.resume()
        done.wait()
        return (try? JSONValue.parse(out.text)) ?? .null
    }
}
