import Foundation
import XCTest
import HTTPServer
import JSON
@testable import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// The webhook-endpoint and events API on real PostgreSQL (docs/webhooks.md): creation with a
/// secret shown once and replayed, validation at every limit, SSRF refusals at creation,
/// tenant isolation, and the status triggers that write events (exact transitions only, same
/// transaction: a rolled-back change leaves none).
final class WebhookAPITests: XCTestCase {
    var env: TestEnvironment!

    override func setUpWithError() throws { env = try TestEnvironment.make(webhookAllowPrivate: true) }
    override func tearDown() { env?.tearDown() }

    func create(
        _ master: String, url: String = "https://hooks.example.test/lr", events: JSONValue = ["*"], key: String = UUID().uuidString,
        extra: [String: JSONValue] = [:]
    ) -> TestEnvironment.Reply {
        var o: [String: JSONValue] = ["url": .string(url), "events": events, "idempotency_key": .string(key)]
        for (k, v) in extra { o[k] = v }
        return env.call("POST", "/v1/webhook-endpoints", .object(o), as: master)
    }

    /// The creation-time address check (docs/webhooks.md "Safety") is bounded: a lookup that
    /// does not answer within its deadline counts as unresolved (the connect-time check still
    /// applies), and when every lookup slot is held by such lookups the next caller gets 503
    /// instead of a handler thread stuck for the resolver's timeout.
    func testTheAddressLookupIsBoundedInTimeAndConcurrency() throws {
        let began = Date()
        XCTAssertEqual(
            try WebhookAddressCheck.resolveBounded("slow.example", tenant: "ten_a", deadlineSeconds: 0.2) { _ in
                Thread.sleep(forTimeInterval: 1)
                return [[10, 0, 0, 1]]
            }, [])
        XCTAssertLessThan(Date().timeIntervalSince(began), 0.9, "the caller waited for its deadline only")
        // That lookup still runs: tenant a's one lookup at a time is taken until it ends.
        XCTAssertThrowsError(try WebhookAddressCheck.resolveBounded("again.example", tenant: "ten_a") { _ in [] }) { e in
            XCTAssertEqual((e as? HTTPError)?.status, 503, "\(e)")
        }
        Thread.sleep(forTimeInterval: 1)  // it ends and gives its slots back
        // Stuck lookups of several tenants hold every process slot: the next caller gets 503.
        let hold = DispatchSemaphore(value: 0)
        for i in 0..<WebhookAddressCheck.maxConcurrentLookups {
            _ = try WebhookAddressCheck.resolveBounded("stuck.example", tenant: "ten_\(i)", deadlineSeconds: 0.01) { _ in
                hold.wait()
                return []
            }
        }
        XCTAssertThrowsError(try WebhookAddressCheck.resolveBounded("next.example", tenant: "ten_z", slotWaitSeconds: 0.1) { _ in [] }) {
            e in XCTAssertEqual((e as? HTTPError)?.status, 503, "\(e)")
        }
        for _ in 0..<WebhookAddressCheck.maxConcurrentLookups { hold.signal() }
        eventually("the slots come back", within: 5) {
            (try? WebhookAddressCheck.resolveBounded("ok.example", tenant: "ten_a", slotWaitSeconds: 0.05) { _ in [[93, 184, 216, 34]] })
                == [[93, 184, 216, 34]]
        }
    }

    func testCreateShowsTheSecretOnceAndReplaysIt() throws {
        let t = try env.tenant()
        let a = create(t.master, events: ["target.ended", "operation.failed"], key: "k1", extra: ["description": "ops"])
        XCTAssertEqual(a.status, 201, String(decoding: a.raw, as: UTF8.self))
        XCTAssertEqual(a["object"]?.stringValue, "webhook_endpoint")
        XCTAssertEqual(a["status"]?.stringValue, "enabled")
        XCTAssertEqual(a["events"], ["operation.failed", "target.ended"])
        let secret = try XCTUnwrap(a["secret"]?.stringValue)
        XCTAssertTrue(secret.hasPrefix("whsec_") && secret.count >= 6 + 43, secret)
        let id = try XCTUnwrap(a["id"]?.stringValue)
        XCTAssertTrue(id.hasPrefix("we_"))
        // Replay: the same secret again, flagged; no second endpoint.
        let b = create(t.master, events: ["target.ended", "operation.failed"], key: "k1", extra: ["description": "ops"])
        XCTAssertEqual(b.headers["idempotent-replayed"], "true")
        XCTAssertEqual(b["secret"]?.stringValue, secret)
        XCTAssertEqual(b["id"]?.stringValue, id)
        XCTAssertEqual(create(t.master, key: "k1").errorCode, "IDEMPOTENCY_KEY_REUSED")
        // Reads never show it; the replay record is stored sealed, never in clear.
        let g = env.call("GET", "/v1/webhook-endpoints/\(id)", as: t.master)
        XCTAssertEqual(g.status, 200)
        XCTAssertNil(g["secret"])
        let l = env.call("GET", "/v1/webhook-endpoints", as: t.master)
        XCTAssertEqual(l["data"]?.arrayValue?.count, 1)
        XCTAssertNil(l["data"]?.arrayValue?.first?["secret"])
        let clear = try env.db.system { c in
            try c.query("SELECT count(*)::int AS n FROM idempotency_records WHERE convert_from(COALESCE(response_body, ''), 'UTF8') LIKE '%whsec_%'")[
                0
            ].int("n")
        }
        XCTAssertEqual(clear, 0)
        XCTAssertFalse(env.logText.contains(secret), "a secret is never logged")
        // The audit trail names the action.
        let audit = env.call("GET", "/v1/audit-events", as: t.master)
        XCTAssertTrue((audit["data"]?.arrayValue ?? []).contains { $0["action"]?.stringValue == "webhook_endpoint.create" })
    }

    func testValidationAtEveryLimit() throws {
        let t = try env.tenant()
        func field(_ r: TestEnvironment.Reply) -> String? { r.json["error"]?["details"]?["field"]?.stringValue }
        let longURL = "https://h.example.test/" + String(repeating: "a", count: WebhookRules.maxURLLength - 23)
        XCTAssertEqual(longURL.utf8.count, 2048)
        XCTAssertEqual(create(t.master, url: longURL).status, 201)
        let tooLong = create(t.master, url: longURL + "a")
        XCTAssertEqual(tooLong.status, 400)
        XCTAssertEqual(field(tooLong), "url")
        XCTAssertEqual(field(create(t.master, url: "ftp://h.example.test/")), "url")
        XCTAssertEqual(field(create(t.master, url: "https://user:pw@h.example.test/")), "url")
        XCTAssertEqual(field(create(t.master, url: "not a url")), "url")
        XCTAssertEqual(field(create(t.master, events: [])), "events")
        XCTAssertEqual(field(create(t.master, events: ["target.ended", "nope"])), "events.1")
        XCTAssertEqual(field(create(t.master, events: ["target.ended", "target.ended"])), "events.1")
        XCTAssertEqual(create(t.master, events: ["channel.ended"]).status, 201, "channel.ended is a reserved, subscribable type")
        XCTAssertEqual(create(t.master, extra: ["description": .string(String(repeating: "d", count: 500))]).status, 201)
        XCTAssertEqual(field(create(t.master, extra: ["description": .string(String(repeating: "d", count: 501))])), "description")
        XCTAssertEqual(field(create(t.master, extra: ["unknown": 1])), "unknown")
        let id = create(t.master)["id"]?.stringValue ?? ""
        let ok = env.call("POST", "/v1/webhook-endpoints/\(id)/rotate-secret", ["expires_in_seconds": 604800], as: t.master)
        XCTAssertEqual(ok.status, 200, String(decoding: ok.raw, as: UTF8.self))
        let over = env.call("POST", "/v1/webhook-endpoints/\(id)/rotate-secret", ["expires_in_seconds": 604801], as: t.master)
        XCTAssertEqual(over.status, 400)
        XCTAssertEqual(field(over), "expires_in_seconds")
        XCTAssertEqual(
            field(env.call("POST", "/v1/webhook-endpoints/\(id)/rotate-secret", ["expires_in_seconds": -1], as: t.master)), "expires_in_seconds")
        XCTAssertEqual(field(env.call("PATCH", "/v1/webhook-endpoints/\(id)", ["status": "paused"], as: t.master)), "status")
        XCTAssertEqual(field(env.call("GET", "/v1/events?type=target.exploded", as: t.master)), "type")
        XCTAssertEqual(field(env.call("GET", "/v1/events?target_id=st_x", as: t.master)), "target_id")
        XCTAssertEqual(field(env.call("GET", "/v1/events?channel_id=tgt_x", as: t.master)), "channel_id")
        XCTAssertEqual(field(env.call("GET", "/v1/events?limit=201", as: t.master)), "limit")
        XCTAssertEqual(env.call("GET", "/v1/events?limit=200", as: t.master).status, 200)
    }

    func testPatchRotateDeleteAndTenantIsolation() throws {
        let a = try env.tenant(name: "A"), b = try env.tenant(name: "B")
        let id = create(a.master)["id"]?.stringValue ?? ""
        let p = env.call(
            "PATCH", "/v1/webhook-endpoints/\(id)",
            [
                "url": "https://other.example.test/x", "events": ["target.ready"],
                "status": "disabled"
            ], as: a.master)
        XCTAssertEqual(p.status, 200, String(decoding: p.raw, as: UTF8.self))
        XCTAssertEqual(p["url"]?.stringValue, "https://other.example.test/x")
        XCTAssertEqual(p["events"], ["target.ready"])
        XCTAssertEqual(p["status"]?.stringValue, "disabled")
        XCTAssertEqual(p["disabled_reason"]?.stringValue, "manual")
        let e = env.call("PATCH", "/v1/webhook-endpoints/\(id)", ["status": "enabled"], as: a.master)
        XCTAssertEqual(e["status"]?.stringValue, "enabled")
        XCTAssertEqual(e["disabled_reason"], .null)
        // Tenant B sees nothing of A's endpoint: every route is 404.
        for (m, path) in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/rotate-secret"), ("POST", "/test"), ("GET", "/deliveries")] {
            let r = env.call(m, "/v1/webhook-endpoints/\(id)\(path)", m == "PATCH" ? ["status": "disabled"] : (m == "POST" ? [:] : nil), as: b.master)
            XCTAssertEqual(r.status, 404, "\(m) \(path): \(String(decoding: r.raw, as: UTF8.self))")
        }
        XCTAssertEqual(env.call("GET", "/v1/webhook-endpoints", as: b.master)["data"]?.arrayValue?.count, 0)
        // A's events are queued for A's endpoints only (B's subscribes to everything).
        let bId = create(b.master)["id"]?.stringValue ?? ""
        try env.db.tenant(a.id) { c in _ = try EventStore.record(c, tenantId: a.id, type: .targetReady, object: ["object": "target"]) }
        let rows = try env.db.system { c in try c.query("SELECT endpoint_id FROM webhook_deliveries").map { try $0.string("endpoint_id") } }
        XCTAssertEqual(rows, [id])
        XCTAssertFalse(rows.contains(bId))
        XCTAssertEqual(env.call("GET", "/v1/events", as: b.master)["data"]?.arrayValue?.count, 0)
        let evA = env.call("GET", "/v1/events", as: a.master)["data"]?.arrayValue?.first?["id"]?.stringValue ?? ""
        XCTAssertEqual(env.call("GET", "/v1/events/\(evA)", as: a.master).status, 200)
        XCTAssertEqual(env.call("GET", "/v1/events/\(evA)", as: b.master).status, 404)
        // RLS: B's transaction cannot see A's events or endpoints even without the filter.
        let seen = try env.db.tenant(b.id) { c in
            try c.query("SELECT count(*)::int AS n FROM events")[0].int("n")
                + (try c.query("SELECT count(*)::int AS n FROM webhook_endpoints")[0].int("n"))
        }
        XCTAssertEqual(seen, 1, "only B's own endpoint")
        // Sender keys cannot manage webhooks.
        let w = try LifecycleWorld.make(env)
        XCTAssertEqual(env.call("GET", "/v1/webhook-endpoints", as: w.sender.credential).status, 403)
        XCTAssertEqual(env.call("GET", "/v1/events", as: w.sender.credential).status, 403)
        // Delete: gone, with its queued deliveries.
        let d = env.call("DELETE", "/v1/webhook-endpoints/\(id)", as: a.master)
        XCTAssertEqual(d.status, 200)
        XCTAssertEqual(d["deleted"], true)
        XCTAssertEqual(env.call("GET", "/v1/webhook-endpoints/\(id)", as: a.master).status, 404)
        XCTAssertEqual(try env.db.system { c in try c.query("SELECT count(*)::int AS n FROM webhook_deliveries")[0].int("n") }, 0)
    }

    /// Ids made by SQL (trigger-recorded events) and by the process sort in creation order even
    /// within one millisecond, so "newest first" listings never depend on random bits.
    func testIdsMadeInOneMillisecondSortInCreationOrder() throws {
        let sqlIds = try env.db.system { c in try (0..<300).map { _ in try c.query("SELECT lr_new_id('evt') AS id")[0].string("id") } }
        XCTAssertEqual(sqlIds, sqlIds.sorted())
        XCTAssertTrue(sqlIds.allSatisfy { Identifier.isValid($0, kind: .auditEvent) })
        let made = (0..<300).map { _ in Identifier.make(.auditEvent) }
        XCTAssertEqual(made, made.sorted())
    }

    /// Migration 0023: `lr_id_text` writes the same 26 characters as the process's
    /// `CrockfordBase32.encode128` of the UUIDv7 layout (48-bit milliseconds, version 7 with 12
    /// bits of sub-millisecond clock, the variant, then the low 6 bits of byte 8 and bytes 9–15
    /// of the random input), at both ends of the millisecond range; `lr_reserve_id_us(n)`
    /// reserves n values, so the next id of the session is later than all of them.
    func testSQLIdTextMatchesTheProcessEncodingAndReservesRanges() throws {
        let cases: [(us: Int64, random: [UInt8])] = [
            (0, [UInt8](repeating: 0, count: 16)),
            (1_764_748_800_123_456, (0..<16).map { UInt8($0 * 17 & 255) }),
            (281_474_976_710_655_999, [UInt8](repeating: 255, count: 16)),
            (1_764_748_800_000_999, (0..<16).map { UInt8(($0 * 91 + 7) & 255) })
        ]
        for (us, r) in cases {
            let hex = r.map { String(format: "%02x", $0) }.joined()
            let sqlId = try env.db.system { c in
                try c.query("SELECT lr_id_text('evt', $1::bigint, decode($2, 'hex')) AS id", [us, hex])[0].string("id")
            }
            let ms = us / 1000, sub = (us % 1000) * 4096 / 1000
            var b = (0..<6).map { UInt8(truncatingIfNeeded: ms >> (8 * (5 - Int64($0)))) }
            b += [UInt8(0x70 | (sub >> 8)), UInt8(sub & 255), (r[8] & 63) | 128] + r[9..<16]
            XCTAssertEqual(sqlId, "evt_" + CrockfordBase32.encode128(b), "us \(us)")
        }
        let (first, next) = try env.db.system { c in
            let first = try c.query("SELECT lr_reserve_id_us(1000) AS us")[0].int64("us")
            let next = try c.query("SELECT lr_reserve_id_us(1) AS us")[0].int64("us")
            XCTAssertTrue(try c.query("SELECT lr_reserve_id_us(0) IS NULL AS none")[0].bool("none"))
            return (first, next)
        }
        XCTAssertGreaterThanOrEqual(next, first + 1000, "the second reservation starts after the first's 1,000 values")
    }

    func testEventsAreKeptThirtyDaysNewestFirst() throws {
        let t = try env.tenant()
        try env.db.tenant(t.id) { c in
            for i in 0..<3 { _ = try EventStore.record(c, tenantId: t.id, type: .quotaExhausted, object: ["n": .int(Int64(i))]) }
            // Made 30 days and a minute ago: its id carries that instant (the purge reads ids).
            let old = Date().addingTimeInterval(-EventStore.retentionSeconds - 60)
            try c.execute(
                "UPDATE events SET created_at = $2, id = $3 WHERE tenant_id = $1 AND data->'object'->>'n' = '0'",
                [t.id, old, Identifier.make(.auditEvent, now: old)])
        }
        let page1 = env.call("GET", "/v1/events?limit=1", as: t.master)
        XCTAssertEqual(page1["data"]?.arrayValue?.first?["data"]?["object"]?["n"]?.intValue, 2, "newest first")
        let cursor = try XCTUnwrap(page1["next_cursor"]?.stringValue)
        let page2 = env.call("GET", "/v1/events?limit=1&cursor=\(cursor)", as: t.master)
        XCTAssertEqual(page2["data"]?.arrayValue?.first?["data"]?["object"]?["n"]?.intValue, 1)
        XCTAssertEqual(page2["next_cursor"], .null, "the 30-day-old event is not listed")
        let purged = try env.db.system { c in try EventStore.purgeExpired(c, now: Date()) }
        XCTAssertEqual(purged, 1)
        let left = try env.db.tenant(t.id) { c in try c.query("SELECT count(*) AS n FROM events WHERE tenant_id = $1", [t.id])[0].int("n") }
        XCTAssertEqual(left, 2, "the two events inside the 30 days are kept")
    }

    /// The purge shares its batch between tenants: a tenant with 300 expired events does not
    /// keep another tenant's single expired event waiting for a later pass.
    func testEventPurgeIsRoundRobinAcrossTenants() throws {
        let busy = try env.tenant(), other = try env.tenant()
        func expired(_ tenant: String, count: Int, ageDays: Double) throws {
            try env.db.tenant(tenant) { c in
                for i in 0..<count {
                    let made = Date().addingTimeInterval(-ageDays * 86_400 - Double(i))
                    let e = try XCTUnwrap(EventStore.record(c, tenantId: tenant, type: .quotaExhausted, object: ["n": .int(Int64(i))]))
                    try c.execute(
                        "UPDATE events SET created_at = $3, id = $4 WHERE tenant_id = $1 AND id = $2",
                        [tenant, e.id, made, Identifier.make(.auditEvent, now: made)])
                }
            }
        }
        try expired(busy.id, count: 300, ageDays: 40)
        try expired(other.id, count: 1, ageDays: 31)
        let purged = try env.db.system { c in try EventStore.purgeExpired(c, now: Date(), batch: 100) }
        XCTAssertLessThanOrEqual(purged, 100)
        let left = try env.db.system { c in
            try c.query("SELECT count(*) AS n FROM events WHERE tenant_id = $1", [other.id])[0].int("n")
        }
        XCTAssertEqual(left, 0, "the other tenant's expired event went in the first pass")
    }

    /// The purge's id bound: an id of the cut-off millisecond or later sorts at or above it,
    /// one of the millisecond before sorts below it, bytewise as PostgreSQL compares them.
    func testEventIdFloorSeparatesMilliseconds() {
        let instant = Date(timeIntervalSince1970: 1_790_000_000.123)
        let floor = EventStore.idFloor(instant)
        for _ in 0..<50 {
            XCTAssertLessThan(Identifier.make(.auditEvent, now: instant.addingTimeInterval(-0.001)), floor)
            XCTAssertGreaterThan(Identifier.make(.auditEvent, now: instant), floor)
        }
        XCTAssertEqual(floor.count, "evt_".count + 10)
    }

    /// Each status trigger fires on exactly the transition its type names, in the transaction
    /// that makes it.
    func testStatusTriggersWriteExactlyTheNamedEvents() throws {
        let w = try LifecycleWorld.make(env)  // inserts a ready start target → start_target.ready
        let tenant = w.tenant.id
        func types() throws -> [String] {
            try env.db.tenant(tenant) { c in
                try c.query("SELECT type FROM events WHERE tenant_id = $1 ORDER BY id", [tenant]).map { try $0.string("type") }
            }
        }
        func sql(_ s: String, _ p: [PostgresBindable?] = []) throws { try env.db.tenant(tenant) { c in _ = try c.execute(s, p) } }
        XCTAssertEqual(try types(), ["start_target.ready"])
        let tgt = w.start()
        let op = try env.db.tenant(tenant) { c in try c.query("SELECT id FROM operations WHERE tenant_id = $1", [tenant])[0].string("id") }
        XCTAssertEqual(try types(), ["start_target.ready"], "an accepted write (queued) is no event yet")
        try sql("UPDATE operations SET status = 'sending' WHERE tenant_id = $1 AND id = $2", [tenant, op])
        try sql("UPDATE operations SET status = 'sending', attempts = attempts + 1 WHERE tenant_id = $1 AND id = $2", [tenant, op])
        XCTAssertEqual(try types(), ["start_target.ready"], "queued/sending and same-status updates are no event")
        // A rolled-back change leaves no event.
        XCTAssertThrowsError(
            try env.db.tenant(tenant) { c in
                try c.execute("UPDATE operations SET status = 'accepted' WHERE tenant_id = $1 AND id = $2", [tenant, op])
                throw PostgresError(kind: .query, message: "roll back", sqlState: "XX000")
            })
        XCTAssertEqual(try types(), ["start_target.ready"])
        try sql("UPDATE operations SET status = 'unknown' WHERE tenant_id = $1 AND id = $2", [tenant, op])
        try sql("UPDATE targets SET status = 'token_pending' WHERE tenant_id = $1 AND id = $2", [tenant, tgt])
        XCTAssertEqual(try types(), ["start_target.ready", "operation.unknown"])
        try sql("UPDATE targets SET status = 'ready' WHERE tenant_id = $1 AND id = $2", [tenant, tgt])
        try sql("UPDATE targets SET status = 'ready', push_token = 'rotated' WHERE tenant_id = $1 AND id = $2", [tenant, tgt])
        XCTAssertEqual(try types(), ["start_target.ready", "operation.unknown", "target.ready"], "a token rotation on a ready target is no event")
        // Two updates: one superseded (no event), one expired.
        let u1 = w.update(tgt, ["eta": 1], revision: 1)
        let u2 = w.update(tgt, ["eta": 2], revision: 2)
        XCTAssertEqual(u1.status, 202)
        XCTAssertEqual(u2.status, 202)
        try sql("UPDATE operations SET status = 'expired' WHERE tenant_id = $1 AND id = $2", [tenant, u2["operation"]?["id"]?.stringValue ?? ""])
        try sql("UPDATE operations SET status = 'failed' WHERE tenant_id = $1 AND id = $2", [tenant, op])
        XCTAssertEqual(Set(try types().suffix(2)), Set(["operation.expired", "operation.failed"]))
        let before = try types().count
        try sql("UPDATE operations SET status = 'cancelled' WHERE tenant_id = $1 AND status = 'superseded'", [tenant])
        XCTAssertEqual(try types().count, before, "superseded/cancelled are no event")
        // Start target ready → pending (dead push-to-start token) and back.
        try sql("UPDATE start_targets SET status = 'pending', push_to_start_token = NULL WHERE tenant_id = $1", [tenant])
        try sql("UPDATE start_targets SET status = 'ready', push_to_start_token = 'new' WHERE tenant_id = $1", [tenant])
        XCTAssertEqual(Set(try types().suffix(2)), Set(["start_target.pending", "start_target.ready"]))
        // A device's local end → target.ended (device); retiring the installation → installation.retired.
        let ended = env.call("POST", "/v1/installations/\(w.installationId)/targets/\(tgt)/ended", [:], as: w.installationCredential)
        XCTAssertEqual(ended.status, 200, String(decoding: ended.raw, as: UTF8.self))
        let retired = env.call("POST", "/v1/installations/\(w.installationId)/disconnect", [:], as: w.installationCredential)
        XCTAssertEqual(retired.status, 200, String(decoding: retired.raw, as: UTF8.self))
        XCTAssertEqual(Set(try types().suffix(2)), Set(["target.ended", "installation.retired"]))
        let evs = env.call("GET", "/v1/events?type=target.ended", as: w.tenant.master)
        XCTAssertEqual(evs["data"]?.arrayValue?.first?["data"]?["object"]?["end_reason"]?.stringValue, "device")
        let st = env.call("GET", "/v1/events?type=installation.retired", as: w.tenant.master)
        XCTAssertEqual(st["data"]?.arrayValue?.first?["data"]?["object"]?["status"]?.stringValue, "retired")
        XCTAssertEqual(st["data"]?.arrayValue?.first?["data"]?["object"]?["id"]?.stringValue, w.installationId)
    }

    /// `quota.exhausted` once per day, at the write that takes the last unit.
    func testQuotaExhaustedOnceAtTheLastUnit() throws {
        let w = try LifecycleWorld.make(env, quota: 2)
        func count() throws -> Int {
            try env.db.tenant(w.tenant.id) { c in try c.query("SELECT count(*)::int AS n FROM events WHERE type = 'quota.exhausted'")[0].int("n") }
        }
        let tgt = w.start()
        XCTAssertEqual(try count(), 0)
        XCTAssertEqual(w.update(tgt, ["eta": 2], revision: 1).status, 202)
        XCTAssertEqual(try count(), 1)
        XCTAssertEqual(w.update(tgt, ["eta": 3], revision: 2).errorCode, "QUOTA_EXCEEDED")
        // A refused write is no event either.
        XCTAssertEqual(try count(), 1)
        let ev = env.call("GET", "/v1/events?type=quota.exhausted", as: w.tenant.master)["data"]?.arrayValue?.first?["data"]?["object"]
        XCTAssertEqual(ev?["limit"]?.intValue, 2)
        XCTAssertEqual(ev?["remaining"]?.intValue, 0)
    }
}

/// SSRF at creation with `LIVERELAY_WEBHOOK_ALLOW_PRIVATE` unset: https only, and no URL whose
/// host resolves to a loopback, private, link-local or unspecified address.
final class WebhookSSRFCreationTests: XCTestCase {
    var env: TestEnvironment!
    override func setUpWithError() throws { env = try TestEnvironment.make(webhookAllowPrivate: false) }
    override func tearDown() { env?.tearDown() }

    func testPrivateAddressesAndPlainHTTPAreRefusedAtCreation() throws {
        let t = try env.tenant()
        for url in [
            "https://localhost/hook", "https://127.0.0.1/hook", "https://127.8.9.10:8443/x", "https://10.1.2.3/",
            "https://172.16.0.1/", "https://192.168.1.1/", "https://169.254.169.254/latest", "https://0.0.0.0/",
            "https://[::1]/", "https://[fe80::1]/", "https://[fd00::1]/", "https://[::ffff:127.0.0.1]/",
            "http://hooks.example.test/"
        ] {
            let r = env.call(
                "POST", "/v1/webhook-endpoints", ["url": .string(url), "events": ["*"], "idempotency_key": .string(UUID().uuidString)],
                as: t.master)
            XCTAssertEqual(r.status, 400, url)
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST", url)
            XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, "url", url)
        }
        // A public address is accepted (an IP literal: resolving it sends nothing anywhere).
        let id = env.call(
            "POST", "/v1/webhook-endpoints", ["url": "https://8.8.8.8/x", "events": ["*"], "idempotency_key": "ok"],
            as: t.master)
        XCTAssertEqual(id.status, 201)
        let patched = env.call("PATCH", "/v1/webhook-endpoints/\(id["id"]?.stringValue ?? "")", ["url": "https://localhost:9/"], as: t.master)
        XCTAssertEqual(patched.status, 400)
        XCTAssertEqual(patched.json["error"]?["details"]?["field"]?.stringValue, "url")
    }
}
