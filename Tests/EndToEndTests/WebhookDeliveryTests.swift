import Foundation
import XCTest
import Delivery
import JSON
import LiveRelayAPI
import LiveRelayApp
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Locking
import LiveRelayTestSupport

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let value: Locked<Date>
    init(_ d: Date) { value = Locked(d) }
    var now: Date { value.withLock { $0 } }
    func set(_ d: Date) { value.withLock { $0 = d } }
    func advance(_ s: Double) { value.withLock { $0 = $0.addingTimeInterval(s) } }
}

/// The webhook worker against a real HTTPS receiver: the retry schedule (injected clock and
/// jitter), giving up and disabling after 72 h, disabled endpoints stop, secret rotation
/// overlap, and the HTTP client's rules (SSRF at connect time, redirects, timeouts, size cap).
final class WebhookDeliveryTests: XCTestCase {
    var h: EndToEndHarness!
    var receiver: WebhookReceiver!
    var worker: WebhookWorker?

    override func setUpWithError() throws {
        h = try EndToEndHarness.make()
        receiver = try WebhookReceiver(ca: h.sandbox.ca, tolerance: 0)
    }

    override func tearDown() {
        worker?.stop(timeoutSeconds: 5)
        receiver?.stop()
        h?.tearDown()
    }

    func client(allowPrivate: Bool = true, totalTimeoutMs: Int = 10_000) throws -> WebhookHTTPClient {
        var c = WebhookHTTPConfiguration(allowPrivate: allowPrivate, extraCAFile: h.sandbox.files["ca.pem"])
        c.totalTimeoutMs = totalTimeoutMs
        return try WebhookHTTPClient(configuration: c)
    }

    func startWorker(clock: ManualClock? = nil, random: Double? = nil, allowPrivate: Bool = true, concurrency: Int = 8) throws {
        var wc = WebhookWorkerConfiguration(workerId: "test-\(UUID().uuidString.prefix(6))", concurrency: concurrency)
        wc.pollIntervalSeconds = 0.02
        let now: @Sendable () -> Date
        if let clock { now = { clock.now } } else { now = { Date() } }
        let jitter: @Sendable () -> Double
        if let random { jitter = { random } } else { jitter = { Double.random(in: 0..<1) } }
        let w = WebhookWorker(
            db: h.db, kek: h.kek, client: try client(allowPrivate: allowPrivate), configuration: wc, metrics: h.metrics,
            log: Logger(minimum: .error), now: now, random: jitter)
        w.start()
        worker = w
    }

    func tenant() throws -> (id: String, master: String) {
        let t = try TenantProvisioning.create(h.db, name: "Hooks", dailyPushQuota: 100, actorId: "test", requestId: "test")
        return (t.tenant.id, t.masterCredential)
    }

    func endpoint(_ master: String, path: String, events: JSONValue = ["*"]) throws -> (id: String, secret: String) {
        let r = h.call(
            "POST", "/v1/webhook-endpoints",
            [
                "url": .string(receiver.url(path)), "events": events,
                "idempotency_key": .string(UUID().uuidString)
            ], as: master)
        XCTAssertEqual(r.status, 201, "\(r)")
        return (try XCTUnwrap(r["id"]?.stringValue), try XCTUnwrap(r["secret"]?.stringValue))
    }

    func record(_ tenant: String, _ type: EventType = .targetReady) throws -> String {
        try h.db.tenant(tenant) { c in try EventStore.record(c, tenantId: tenant, type: type, object: ["object": "target", "id": "tgt_x"])?.id ?? "" }
    }

    /// A worker on a manual clock (jitter fixed at `random`), a new tenant with one endpoint at
    /// the receiver's `path`, and one event recorded for it; the clock then reads now, when the
    /// delivery is due (from its commit, database time, on).
    func queuedDelivery(
        path: String, random: Double
    ) throws -> (clock: ManualClock, tenant: (id: String, master: String), endpoint: (id: String, secret: String)) {
        let clock = ManualClock(Date())
        try startWorker(clock: clock, random: random)
        let t = try tenant()
        let e = try endpoint(t.master, path: path)
        _ = try record(t.id)
        clock.set(Date())
        return (clock, t, e)
    }

    func attempts(_ endpoint: String) throws -> Int {
        try h.db.system { c in try c.query("SELECT count(*)::int AS n FROM webhook_attempts WHERE endpoint_id = $1", [endpoint])[0].int("n") }
    }

    /// docs/webhooks.md "Delivery": a claim takes every tenant's first due delivery before any
    /// tenant's second, gives one tenant at most `perTenant` minus its in-flight attempts
    /// however many endpoints it has, and one endpoint at most `perEndpoint` minus its own.
    func testClaimsShareAttemptsPerTenantThenPerEndpoint() throws {
        let a = try tenant(), b = try tenant()
        let aEndpoints = try (0..<3).map { _ in try endpoint(a.master, path: "/a").id }
        _ = try endpoint(b.master, path: "/b")
        for _ in 0..<4 { _ = try record(a.id) }  // 12 deliveries for a (4 per endpoint)
        _ = try record(b.id)  // 1 for b
        func claim(limit: Int, _ shares: WebhookClaimShares) throws -> [WebhookJob] {
            try h.db.system { c in
                try WebhookStore.claim(c, owner: "w", now: Date().addingTimeInterval(1), limit: limit, leaseSeconds: 60, shares: shares)
            }
        }
        let first = try claim(limit: 8, WebhookClaimShares(perEndpoint: 4, perTenant: 4))
        XCTAssertEqual(first.filter { $0.tenantId == a.id }.count, 4, "a's share, not the 7 free places")
        XCTAssertEqual(first.filter { $0.tenantId == b.id }.count, 1, "b is not behind a's backlog")
        XCTAssertEqual(Set(first.filter { $0.tenantId == a.id }.map(\.endpointId)), Set(aEndpoints), "round-robin over a's endpoints")

        // a at its share: a new delivery of b is taken, none of a's.
        _ = try record(b.id)
        let second = try claim(limit: 8, WebhookClaimShares(perEndpoint: 4, perTenant: 4, inFlightByTenant: [a.id: 4, b.id: 1]))
        XCTAssertEqual(second.map(\.tenantId), [b.id])
        // One place left for a, and an endpoint at its own cap is skipped.
        let third = try claim(
            limit: 8,
            WebhookClaimShares(
                perEndpoint: 2, perTenant: 5, inFlightByEndpoint: [aEndpoints[0]: 2],
                inFlightByTenant: [a.id: 4]))
        XCTAssertEqual(third.count, 1, "\(third.map(\.endpointId))")
        XCTAssertNotEqual(third.first?.endpointId, aEndpoints[0])
    }

    /// docs/webhooks.md "Delivery", migration 0028: 2,100 due deliveries of one tenant's
    /// disabled endpoint (they stay pending) and another 2,100 of its enabled endpoint do not keep
    /// another tenant's single due delivery out of a claim; the disabled endpoint's deliveries are
    /// never claimed, its `webhook.test` one is. (With the former 2,000 earliest candidates of the
    /// whole table, the claim found only the first tenant's rows.)
    func testNeitherADisabledEndpointsBacklogNorAnotherTenantsBacklogCrowdsATenantOut() throws {
        let a = try tenant(), b = try tenant()
        let disabled = try endpoint(a.master, path: "/off"), busy = try endpoint(a.master, path: "/busy")
        let quiet = try endpoint(b.master, path: "/b")
        // 2,100 events of a (one delivery per endpoint each), due a minute ago: older than b's.
        try h.db.tenant(a.id) { c in
            for _ in 0..<2100 { _ = try EventStore.record(c, tenantId: a.id, type: .targetReady, object: ["object": "target", "id": "tgt_x"]) }
        }
        _ = try h.db.system { c in
            try c.execute("UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 minute' WHERE tenant_id = $1", [a.id])
            try c.execute("UPDATE webhook_endpoints SET status = 'disabled' WHERE tenant_id = $1 AND id = $2", [a.id, disabled.id])
        }
        XCTAssertEqual(h.call("POST", "/v1/webhook-endpoints/\(disabled.id)/test", as: a.master).status, 202)
        _ = try record(b.id)
        let claimed = try h.db.system { c in
            try WebhookStore.claim(
                c, owner: "w", now: Date().addingTimeInterval(1), limit: 8, leaseSeconds: 60,
                shares: WebhookClaimShares(perEndpoint: 4, perTenant: 4))
        }
        XCTAssertEqual(claimed.filter { $0.endpointId == quiet.id }.count, 1, "b's delivery is claimed")
        XCTAssertEqual(claimed.filter { $0.endpointId == busy.id }.count, 3, "a's enabled endpoint: a's share less its test")
        XCTAssertEqual(
            claimed.filter { $0.endpointId == disabled.id }.map(\.eventType), ["webhook.test"], "only the test reaches a disabled endpoint")
    }

    /// docs/webhooks.md "Delivery": one tenant's hanging receivers (four endpoints) hold at most
    /// half of the worker's threads; another tenant's delivery goes out before any of them ends.
    func testOneTenantsSlowEndpointsDoNotDelayAnotherTenantsDelivery() throws {
        let slow = try tenant(), fast = try tenant()
        let slowEndpoints = try (0..<4).map { _ in try endpoint(slow.master, path: "/slow/8") }
        let quick = try endpoint(fast.master, path: "/fast")
        try receiver.setSecrets(slowEndpoints.map(\.secret) + [quick.secret])
        for _ in 0..<2 { _ = try record(slow.id) }  // 8 deliveries, 2 per slow endpoint
        try startWorker(concurrency: 4)
        func slowLeased() throws -> Int {
            try h.db.system { c in
                try c.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE tenant_id = $1 AND lease_owner IS NOT NULL", [slow.id])[0].int(
                    "n")
            }
        }
        eventually("the slow tenant's attempts are in flight") { ((try? slowLeased()) ?? 0) >= 2 }
        _ = try record(fast.id)
        eventually("the other tenant's delivery goes out") { receiver.requests().contains { $0["path"]?.stringValue == "/fast" } }
        let finished = try slowEndpoints.map { try attempts($0.id) }.reduce(0, +)
        XCTAssertEqual(finished, 0, "delivered while every slow attempt still hangs")
        XCTAssertEqual(try slowLeased(), 2, "the slow tenant holds its half (2 of 4 threads), no more")
    }

    func testRetriesFollowTheScheduleThenGiveUpAndDisableTheEndpointAfter72Hours() throws {
        let (clock, t, failing) = try queuedDelivery(path: "/status/500", random: 0.5)
        let start = clock.now
        var n = 0
        var last: (status: String, next: Date) = ("pending", start)
        while n < 100 {
            n += 1
            let want = n
            eventually("attempt \(n)", within: 10) { ((try? attempts(failing.id)) ?? 0) >= want }
            let row = try h.db.system { c in
                try c.query("SELECT status, attempts, next_attempt_at FROM webhook_deliveries WHERE endpoint_id = $1", [failing.id])[0]
            }
            XCTAssertEqual(try row.int("attempts"), n)
            last = (try row.string("status"), try row.date("next_attempt_at"))
            if last.status != "pending" { break }
            // Full jitter with random = 0.5: half the ceiling 10 s × 2^(n−1), capped at 6 h.
            let expected = 0.5 * min(21600, 10 * pow(2, Double(n - 1)))
            XCTAssertEqual(last.next.timeIntervalSince(clock.now), expected, accuracy: 0.01, "delay after attempt \(n)")
            if n == 1 { XCTAssertLessThan(expected, 10, "the first retry comes within 10 s") }
            clock.set(last.next)
        }
        XCTAssertEqual(last.status, "failed", "given up")
        XCTAssertGreaterThanOrEqual(n, 10)
        XCTAssertGreaterThanOrEqual(clock.now.timeIntervalSince(start), 72 * 3600)
        let ep = h.call("GET", "/v1/webhook-endpoints/\(failing.id)", as: t.master)
        XCTAssertEqual(ep["status"]?.stringValue, "disabled")
        XCTAssertEqual(ep["disabled_reason"]?.stringValue, "failing")
        let audit = h.call("GET", "/v1/audit-events", as: t.master)
        let dis = (audit["data"]?.arrayValue ?? []).first { $0["action"]?.stringValue == "webhook_endpoint.disable" }
        XCTAssertEqual(dis?["object_id"]?.stringValue, failing.id)
        XCTAssertEqual(dis?["actor_id"]?.stringValue, "system")
        let log = h.call("GET", "/v1/webhook-endpoints/\(failing.id)/deliveries?limit=200", as: t.master)
        XCTAssertEqual(log["data"]?.arrayValue?.count, n)
        XCTAssertEqual(log["data"]?.arrayValue?.first?["attempt"]?.intValue, Int64(n), "newest first")
        XCTAssertEqual(log["data"]?.arrayValue?.first?["status_code"]?.intValue, 500)
        XCTAssertEqual(log["data"]?.arrayValue?.first?["error"]?.stringValue, "status 500")
        XCTAssertTrue(h.metrics.render().contains("liverelay_webhook_deliveries_total{result=\"gave_up\"} 1"), h.metrics.render())

        // A disabled endpoint stops: a new event is queued for the enabled endpoint only, which
        // receives it, while the disabled one gets nothing.
        let ok = try endpoint(t.master, path: "/ok")
        try receiver.setSecrets([ok.secret])
        let before = try attempts(failing.id)
        let ev = try record(t.id)
        eventually("the enabled endpoint receives the event") { receiver.requests().contains { $0["event_id"]?.stringValue == ev } }
        XCTAssertEqual(try attempts(failing.id), before)
        XCTAssertEqual(
            try h.db.system { c in
                try c.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND event_id = $2", [failing.id, ev])[0].int(
                    "n")
            }, 0)
        XCTAssertEqual(receiver.requests().filter { $0["path"]?.stringValue == "/status/500" }.count, n)
    }

    func testADeliverySucceedsAfterFailuresAndClearsTheStreak() throws {
        let (clock, t, e) = try queuedDelivery(path: "/status/503", random: 0)
        eventually("first attempt") { ((try? attempts(e.id)) ?? 0) >= 1 }
        XCTAssertNotNil(h.call("GET", "/v1/webhook-endpoints/\(e.id)", as: t.master)["id"])
        try h.db.system { c in _ = try c.execute("UPDATE webhook_endpoints SET url = $2 WHERE id = $1", [e.id, receiver.url("/ok")]) }
        try receiver.setSecrets([e.secret])
        clock.advance(1)
        eventually("delivered on the retry") { receiver.requests().contains { $0["path"]?.stringValue == "/ok" } }
        eventually("recorded") {
            (try? h.db.system { c in try c.query("SELECT status FROM webhook_deliveries WHERE endpoint_id = $1", [e.id])[0].string("status") })
                == "delivered"
        }
        XCTAssertNil(
            try h.db.system { c in try c.query("SELECT failing_since FROM webhook_endpoints WHERE id = $1", [e.id])[0].optionalDate("failing_since") }
        )
    }

    func testRotationSignsWithBothSecretsDuringTheOverlapThenOnlyTheNew() throws {
        let clock = ManualClock(Date())
        try startWorker(clock: clock)
        let t = try tenant()
        let e = try endpoint(t.master, path: "/ok")
        func testEvent() throws -> JSONValue {
            let r = h.call("POST", "/v1/webhook-endpoints/\(e.id)/test", [:], as: t.master)
            XCTAssertEqual(r.status, 202, "\(r)")
            XCTAssertEqual(r["type"]?.stringValue, "webhook.test")
            if clock.now < Date() { clock.set(Date()) }  // due from its commit on
            let id = r["id"]?.stringValue
            var got: JSONValue?
            eventually("test event delivered") {
                got = receiver.requests().first { $0["event_id"]?.stringValue == id }; return got != nil
            }
            return got ?? .null
        }
        func v1s(_ r: JSONValue) -> Int { (r["signature"]?.stringValue ?? "").components(separatedBy: "v1=").count - 1 }
        func verifies(_ r: JSONValue, _ secret: String) -> Bool {
            WebhookSignature.verify(
                header: r["signature"]?.stringValue ?? "", secret: secret, body: Array((r["body"]?.stringValue ?? "").utf8),
                now: clock.now)
        }
        try receiver.setSecrets([e.secret])
        let first = try testEvent()
        XCTAssertEqual(v1s(first), 1)
        XCTAssertEqual(first["verified"], true)
        XCTAssertTrue(verifies(first, e.secret))

        let rot = h.call(
            "POST", "/v1/webhook-endpoints/\(e.id)/rotate-secret", ["expires_in_seconds": 3600, "idempotency_key": "rot-1"], as: t.master)
        XCTAssertEqual(rot.status, 200, "\(rot)")
        let s2 = try XCTUnwrap(rot["secret"]?.stringValue)
        XCTAssertNotEqual(s2, e.secret)
        let replay = h.call(
            "POST", "/v1/webhook-endpoints/\(e.id)/rotate-secret", ["expires_in_seconds": 3600, "idempotency_key": "rot-1"], as: t.master)
        XCTAssertEqual(replay["secret"]?.stringValue, s2, "a replayed rotation returns the same new secret")
        let during = try testEvent()
        XCTAssertEqual(v1s(during), 2, "one v1 per active secret")
        XCTAssertTrue(verifies(during, e.secret), "the old secret still verifies during the overlap")
        XCTAssertTrue(verifies(during, s2))
        XCTAssertEqual(during["verified"], true, "the receiver holding only the old secret accepts it")

        clock.advance(3601)
        let after = try testEvent()
        XCTAssertEqual(v1s(after), 1)
        XCTAssertFalse(verifies(after, e.secret), "the old secret stopped signing when it expired")
        XCTAssertTrue(verifies(after, s2))
        XCTAssertEqual(after["verified"], false, "the receiver must move to the new secret")

        let rot3 = h.call("POST", "/v1/webhook-endpoints/\(e.id)/rotate-secret", [:], as: t.master)
        let s3 = try XCTUnwrap(rot3["secret"]?.stringValue)
        try receiver.setSecrets([s3])
        let now = try testEvent()
        XCTAssertEqual(v1s(now), 1, "without expires_in_seconds the old secret stops at once")
        XCTAssertFalse(verifies(now, s2))
        XCTAssertEqual(now["verified"], true)
    }

    func testTheConnectionToANameThatResolvesToLoopbackIsRefusedWithoutAllowPrivate() throws {
        // The endpoint was accepted (the API here allows private targets); the worker's client
        // does not: the check on the connected address refuses localhost → 127.0.0.1/::1.
        try startWorker(allowPrivate: false)
        let t = try tenant()
        let r = h.call(
            "POST", "/v1/webhook-endpoints",
            [
                "url": .string(receiver.url("/ok", host: "localhost")), "events": ["*"],
                "idempotency_key": "ssrf"
            ], as: t.master)
        let id = try XCTUnwrap(r["id"]?.stringValue)
        _ = try record(t.id)
        eventually("attempted") { ((try? attempts(id)) ?? 0) >= 1 }
        let log = h.call("GET", "/v1/webhook-endpoints/\(id)/deliveries", as: t.master)
        let err = log["data"]?.arrayValue?.first?["error"]?.stringValue ?? ""
        XCTAssertEqual(err, WebhookHTTPClient.refusedAddressError, "a fixed text: the tenant's log never names the refused address")
        XCTAssertEqual(log["data"]?.arrayValue?.first?["status_code"], .null)
        XCTAssertEqual(receiver.requests().count, 0, "nothing reached the receiver")
        // Directly: an IP literal too, and plain http.
        let c = try client(allowPrivate: false)
        XCTAssertEqual(c.post(url: receiver.url("/ok"), headers: [], body: []).error, WebhookHTTPClient.refusedAddressError)
        XCTAssertTrue(c.post(url: "http://localhost:\(receiver.port)/", headers: [], body: []).error?.hasPrefix("url refused") ?? false)
        XCTAssertEqual(receiver.requests().count, 0)
    }

    func testRedirectsAreNotFollowedAndTimeoutsAndLargeResponsesFail() throws {
        let c = try client(allowPrivate: true, totalTimeoutMs: 400)
        let redirect = c.post(url: receiver.url("/status/302"), headers: [("Content-Type", "application/json")], body: Array("{}".utf8))
        XCTAssertEqual(redirect.statusCode, 302)
        XCTAssertEqual(redirect.error, "redirect not followed")
        XCTAssertFalse(redirect.delivered)
        let slow = c.post(url: receiver.url("/slow/2"), headers: [], body: [])
        XCTAssertTrue(slow.error?.hasPrefix("timeout") ?? false, "\(slow)")
        XCTAssertNil(slow.statusCode)
        let big = c.post(url: receiver.url("/big"), headers: [], body: [])
        XCTAssertEqual(big.error, "response body over 65536 bytes")
        XCTAssertFalse(big.delivered)
        let ok = c.post(url: receiver.url("/status/204"), headers: [], body: [])
        XCTAssertTrue(ok.delivered, "\(ok)")
        XCTAssertEqual(receiver.requests().filter { $0["path"]?.stringValue == "/status/302" }.count, 1, "the redirect was not followed")
    }
}
