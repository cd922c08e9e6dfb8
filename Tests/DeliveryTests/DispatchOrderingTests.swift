import Crypto
import Foundation
import XCTest
import Delivery
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import Locking
import LiveRelayTestSupport

/// docs/write-semantics.md ordering and coalescing, §9 workers: commit order per target, at most one in
/// flight per target, strictly increasing APNs timestamps, coalescing, lease rescue, several
/// dispatchers on one database.
final class DispatchOrderingTests: DispatchTestCase {

    /// Ops of each target in commit (seq) order.
    func opsByTarget(_ tenant: String) throws -> [String: [String]] {
        let rows = try h.db.system { c in
            try c.query("SELECT target_id, id FROM operations WHERE tenant_id = $1 ORDER BY target_id, seq", [tenant])
        }
        var out: [String: [String]] = [:]
        for r in rows { out[try r.string("target_id"), default: []].append(try r.string("id")) }
        return out
    }

    func assertOrderedAndIncreasing(_ calls: [FakeSender.Call], expected: [String: [String]], file: StaticString = #filePath, line: UInt = #line) {
        let byTarget = Dictionary(grouping: calls, by: \.targetId)
        for (tgt, ops) in expected {
            let sent = byTarget[tgt] ?? []
            XCTAssertEqual(sent.map(\.push.operationId), ops, "commit order of target \(tgt)", file: file, line: line)
            let ts = sent.map(\.timestamp)
            XCTAssertEqual(ts, ts.sorted(), file: file, line: line)
            XCTAssertEqual(Set(ts).count, ts.count, "APNs timestamps strictly increasing per target", file: file, line: line)
        }
    }

    /// A tenant with `count` targets on one installation (tokens `<tokenPrefix>-<i>`), each given
    /// `rounds` alert updates (`alertTitle(round)`), round by round. Alert updates are never
    /// coalesced, so all `count × rounds` operations must be sent. Returns the tenant id.
    func tenantWithAlertRounds(targets count: Int, tokenPrefix: String, rounds: Int, alertTitle: (Int) -> String) throws -> String {
        let t = try h.tenant(), inst = try h.installation(t)
        let targets = try (0..<count).map { i in try h.target(t, installation: inst, token: "\(tokenPrefix)-\(i)") }
        for round in 0..<rounds {
            for tgt in targets {
                try h.update(t, target: tgt, state: ["r": .int(Int64(round))], alert: PushAlert(title: alertTitle(round), body: "b"))
            }
        }
        return t
    }

    /// Waits, at most 30 s, until `count` operations of tenant `t` are accepted.
    func waitUntilAccepted(_ t: String, count: Int) throws {
        try eventually("all accepted", within: 30) {
            try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status = 'accepted'", [t]).int("n") == count
        }
    }

    /// Migration 0023: one statement that makes many operations `accepted` records one event
    /// each, with ids from one reserved clock range in the order of the operations' ids, and
    /// with random bits of their own (the last 12 characters are random only).
    func testEventsOfOneStatementGetOrderedIdsWithTheirOwnRandomBits() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        for i in 0..<20 {
            let tgt = try h.target(t, installation: inst, token: "evt-\(i)")
            _ = try h.update(t, target: tgt, state: ["i": .int(Int64(i))])
        }
        let (ops, events) = try h.db.system { c in
            let n = try c.execute("UPDATE operations SET status = 'accepted', accepted_at = now() WHERE tenant_id = $1 AND status = 'queued'", [t])
            XCTAssertEqual(n, 20)
            let ops = try c.query("SELECT id FROM operations WHERE tenant_id = $1 AND status = 'accepted' ORDER BY id", [t]).map {
                try $0.string("id")
            }
            let events = try c.query(
                "SELECT id, data->'object'->>'id' AS op FROM events WHERE tenant_id = $1 AND type = 'operation.accepted' ORDER BY id", [t]
            ).map { (id: try $0.string("id"), op: try $0.string("op")) }
            return (ops, events)
        }
        XCTAssertEqual(events.map(\.op), ops, "event ids follow the operations' order")
        XCTAssertEqual(Set(events.map(\.id)).count, 20)
        XCTAssertEqual(Set(events.map { String($0.id.suffix(12)) }).count, 20, "each id draws its own random bits")
    }

    func testPerTargetCommitOrderOneInFlightAndIncreasingTimestamps() throws {
        // All 100 must go out, in order.
        let t = try tenantWithAlertRounds(targets: 20, tokenPrefix: "tok", rounds: 5) { "r\($0)" }
        let fake = h.fakeSender(delay: 0.004)
        h.dispatcher(fake, threads: 8)
        try waitUntilAccepted(t, count: 100)
        XCTAssertEqual(fake.calls.count, 100)
        XCTAssertEqual(fake.maxInFlightPerTarget, 1, "at most one in flight per target")
        assertOrderedAndIncreasing(fake.calls, expected: try opsByTarget(t))
    }

    func testTimestampStaysAboveTheLastOneEvenWhenTheClockIsBehind() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "ts")
        let future = Timestamp.epochSeconds(Date()) + 100
        _ = try h.db.system { c in
            try c.execute("INSERT INTO target_clocks (tenant_id, target_id, last_timestamp) VALUES ($1, $2, $3)", [t, tgt, future])
        }
        let ops = try (0..<3).map { i in try h.update(t, target: tgt, state: ["i": .int(Int64(i))], alert: PushAlert(title: "t", body: "b")) }
        let fake = h.fakeSender()
        h.dispatcher(fake)
        for op in ops { try h.waitFor(t, op, .accepted) }
        XCTAssertEqual(fake.calls.map(\.timestamp), [future + 1, future + 2, future + 3])
        XCTAssertEqual(
            try h.row("SELECT last_timestamp FROM target_clocks WHERE tenant_id = $1 AND target_id = $2", [t, tgt]).int64("last_timestamp"),
            future + 3)
    }

    func testTenQueuedStateOnlyUpdatesSendOnlyTheNewest() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "co")
        let ops = try (1...10).map { i in try h.update(t, target: tgt, state: ["eta": .int(Int64(i))]) }
        XCTAssertEqual(try h.quota(t).reserved, 1, "superseded updates released their reservation")
        let fake = h.fakeSender()
        h.dispatcher(fake)
        try h.waitFor(t, ops.last!, .accepted)
        Thread.sleep(forTimeInterval: 0.4)
        XCTAssertEqual(fake.calls.map(\.push.operationId), [ops.last!])
        XCTAssertEqual(fake.calls.first?.body["aps"]?["content-state"], ["eta": 10])
        for op in ops.dropLast() {
            let r = try h.operation(t, op)
            XCTAssertEqual(r.status, .superseded)
        }
        XCTAssertEqual(try h.operation(t, ops[8]).supersededBy, ops[9])
    }

    func testCoalescingBehindAnInFlightSend() throws {
        let (t, _, tgt, first, fake) = try h.heldUpdate(token: "co2")
        let rest = try (1...9).map { i in try h.update(t, target: tgt, state: ["eta": .int(Int64(i))]) }
        fake.release(first)
        try h.waitFor(t, rest.last!, .accepted)
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(fake.calls.map(\.push.operationId), [first, rest.last!], "the in-flight one, then only the newest")
        XCTAssertEqual(try h.operation(t, first).status, .accepted)
        XCTAssertLessThan(fake.calls[0].timestamp, fake.calls[1].timestamp)
    }

    func testDeadWorkersLeasesAreRescuedWithTheUnknownRules() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let st = try h.startTarget(t, installation: inst, token: "p2s")
        let (startTgt, start) = try h.remoteStart(t, startTarget: st)
        let a = try h.target(t, installation: inst, token: "la"), b = try h.target(t, installation: inst, token: "lb")
        let alertOp = try h.update(t, target: a, state: ["v": 1], alert: PushAlert(title: "x", body: "y"))
        let stateOp = try h.update(t, target: b, state: ["v": 1])
        // Worker A claims everything, "sends" and dies: never applies a result, never renews.
        let claimed = try h.db.system { c in try DispatchStore.claim(c, worker: "dead-worker", limit: 10, leaseSeconds: 30, now: Date()) }
        XCTAssertEqual(Set(claimed.map(\.id)), [start, alertOp, stateOp])
        let stamp = claimed.first { $0.id == stateOp }!.providerTimestamp
        _ = try h.db.system { c in
            try c.execute("UPDATE operations SET lease_expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND status = 'sending'", [t])
        }
        let fake = h.fakeSender()
        h.dispatcher(fake, worker: "worker-b")
        try h.waitFor(t, start, .unknown)
        XCTAssertEqual(try h.targetRecord(t, startTgt).status, .startUnknown)
        try h.waitFor(t, alertOp, .unknown)
        let s = try h.waitFor(t, stateOp, .accepted)
        XCTAssertEqual(s.attempts, 2)
        Thread.sleep(forTimeInterval: 0.4)
        XCTAssertTrue(fake.calls(for: start).isEmpty, "an unknown start is never resent")
        XCTAssertTrue(fake.calls(for: alertOp).isEmpty, "an unknown alert is never resent")
        XCTAssertEqual(fake.calls(for: stateOp).count, 1)
        XCTAssertEqual(fake.calls(for: stateOp).first?.timestamp, stamp, "the resend keeps the timestamp of the lost attempt")
        // The dead worker wakes up late: its result is fenced off.
        let late = try h.db.system { c in
            try DispatchStore.apply(
                c, claimed.first { $0.id == stateOp }!,
                DispatchDecision(operation: .failed(.init(code: "X", message: "late")), quota: .release),
                guard: .lease(owner: "dead-worker", attempts: 1), apnsId: nil, usedToken: "lb")
        }
        XCTAssertFalse(late)
        XCTAssertEqual(try h.operation(t, stateOp).status, .accepted)
    }

    func testHeartbeatKeepsALongSendFromBeingRescued() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "hb")
        let op = try h.update(t, target: tgt, state: ["v": 1], alert: PushAlert(title: "slow", body: "send"))
        let slow = h.fakeSender()
        slow.hold(op)
        h.dispatcher(slow, worker: "worker-a", lease: 1.5)  // heartbeat every 0.5 s
        eventually("in flight") { slow.isHolding(op) }
        let other = h.fakeSender()
        h.dispatcher(other, worker: "worker-b", lease: 1.5)
        Thread.sleep(forTimeInterval: 3.5)
        XCTAssertEqual(try h.operation(t, op).status, .sending, "a live worker's lease is renewed, not rescued")
        slow.release(op)
        try h.waitFor(t, op, .accepted)
        XCTAssertEqual(slow.calls.count + other.calls.count, 1)
    }

    func testTwoDispatchersOnOneDatabaseSendEachOperationOnceInOrder() throws {
        let t = try tenantWithAlertRounds(targets: 30, tokenPrefix: "two", rounds: 5) { _ in "r" }
        // 20 ms per send: each dispatcher holds at most 8 of the 30 targets' heads, and the run
        // lasts longer than one poll interval (0.2 s), so a dispatcher that starts a little later
        // still finds heads. With 4 ms per send, the first one could finish all 150 before the
        // second's first claim (a clean-clone CI run saw worker B send none).
        let fake = h.fakeSender(delay: 0.02)
        let who = TagLog()
        let a = h.dispatcher(TaggingSender(tag: "A", inner: fake, log: who), worker: "worker-a", threads: 4, start: false)
        let b = h.dispatcher(TaggingSender(tag: "B", inner: fake, log: who), worker: "worker-b", threads: 4, start: false)
        a.start()
        b.start()
        try waitUntilAccepted(t, count: 150)
        Thread.sleep(forTimeInterval: 0.3)
        let calls = fake.calls
        XCTAssertEqual(calls.count, 150, "no duplicate sends")
        XCTAssertEqual(Set(calls.map(\.push.operationId)).count, 150)
        XCTAssertEqual(fake.maxInFlightPerTarget, 1)
        assertOrderedAndIncreasing(calls, expected: try opsByTarget(t))
        let tags = who.m.withLock { $0 }
        XCTAssertFalse(tags["A", default: []].isEmpty, "worker A sent some")
        XCTAssertFalse(tags["B", default: []].isEmpty, "worker B sent some")
    }

    func testMetricsCountTransitionsAndLag() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "m")
        let op = try h.update(t, target: tgt, state: ["v": 1])
        h.dispatcher(h.fakeSender())
        try h.waitFor(t, op, .accepted)
        eventually("depth sampled") { h.metrics.render().contains("liverelay_queue_depth 0") }
        let text = h.metrics.render()
        XCTAssertTrue(text.contains("liverelay_operations_total{kind=\"update\",status=\"accepted\"} 1"), text)
        XCTAssertTrue(text.contains("liverelay_dispatch_lag_seconds_count 1"), text)
        XCTAssertTrue(text.contains("liverelay_dispatch_in_flight 0"), text)
    }

    /// docs/operations.md "Metrics": `GET /metrics` needs no credential, so the per-tenant
    /// gauges are labelled by a fingerprint of the tenant id (`tfp_` + 16 hex digits of its
    /// SHA-256), never by the id itself.
    func testPerTenantGaugesCarryAFingerprintNotTheTenantId() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: nil)  // no token yet: the update waits, parked
        _ = try h.update(t, target: tgt, state: ["v": 1])
        h.dispatcher(h.fakeSender())
        let label = "tfp_" + String(Digest.sha256Hex(Array(t.utf8)).prefix(16))
        XCTAssertEqual(Dispatcher.tenantLabel(t), label)
        XCTAssertEqual(Dispatcher.tenantLabel(TenantQueueGauges.otherLabel), "other")
        eventually("the tenant's depth sampled") { h.metrics.render().contains("liverelay_tenant_queue_depth{tenant=\"\(label)\"} 1") }
        XCTAssertFalse(h.metrics.render().contains(t), "no tenant id in the metrics")
    }
}

/// Records which dispatcher sent what, then delegates.
final class TagLog: Sendable { let m = Locked<[String: [String]]>([:]) }

struct TaggingSender: PushSender {
    let tag: String
    let inner: FakeSender
    let log: TagLog
    func send(_ push: OutgoingPush) -> PushResult {
        log.m.withLock { $0[tag, default: []].append(push.operationId) }
        return inner.send(push)
    }
}
