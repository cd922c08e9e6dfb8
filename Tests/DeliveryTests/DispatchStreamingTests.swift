import Foundation
import XCTest
import Delivery
import JSON
import LiveRelayCore
import LiveRelaySandbox
import LiveRelayStore
import Postgres
import Locking
import LiveRelayTestSupport

/// Event-driven sending (docs/delivery.md "Sending", "Wake-ups"): streams in flight are bounded
/// by the provider connection, not by threads; a write in the same process reaches the
/// dispatcher as COMMIT returns. Real PostgreSQL and the sandbox over real HTTP/2.
final class DispatchStreamingTests: DispatchTestCase {

    func testOneSubmitterThreadKeepsEveryClaimedPushInFlight() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        var tokens: [String] = []
        for i in 0..<60 {
            let token = ProviderHarness.hexToken("stream-\(i)")
            tokens.append(token)
            try h.update(t, target: try h.target(t, installation: inst, token: token), state: ["eta": .int(Int64(i))])
        }
        let ph = try ProviderHarness()
        defer { ph.tearDown() }
        ph.source.set(t, try ph.source.credentials(tenantId: ProviderHarness.tenant))
        _ = ph.sandbox.addFault(SandboxFault(provider: "apns", delaySeconds: 2))  // every APNs answer takes 2 s
        let d = h.dispatcher(ph.sender, threads: 1)
        eventually("all 60 delivered", within: 30) { ph.sandbox.deliveries(provider: "apns").count == 60 }
        try eventually("all 60 accepted", within: 30) {
            try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status = 'accepted'", [t]).int("n") == 60
        }
        XCTAssertEqual(d.streamsInFlight.max, 60, "one thread kept all 60 requests in flight at once")
        XCTAssertEqual(d.streamsInFlight.now, 0)
        XCTAssertEqual(Set(ph.sandbox.deliveries(provider: "apns").map(\.token)), Set(tokens), "each target's update arrived once")
        XCTAssertTrue(h.metrics.render().contains("liverelay_dispatch_in_flight_max 60"))
    }

    /// docs/delivery.md "Applying results": an apply that waits on a row lock (a transaction of
    /// the test holds the target of its result, as a slow write would) does not hold back other
    /// targets' results: a second applier commits them meanwhile. With one applier none of
    /// them could be applied before the lock is released.
    func testAnApplyWaitingOnALockDoesNotHoldBackOtherResults() throws {
        // 8 outstanding at most (4 threads): a second applier starts once 4 results wait.
        let (t, inst, x, waiting, fake) = try h.heldUpdate(token: "apply-x")
        let locker = try holdTargetRowWhileItsApplyWaits(t, x) { fake.release(waiting) }
        defer { locker.close() }
        let others = try (0..<16).map { i in
            try h.update(t, target: try h.target(t, installation: inst, token: "apply-\(i)"), state: ["eta": .int(Int64(i))])
        }
        try assertOthersCommitWhileItWaits(t, first: waiting, others: others, locker: locker)
    }

    /// Accepted remote starts have a target effect (`starting` → `ready`/`token_pending`) that
    /// stays on their own targets (`DispatchStore.reachesBeyondTarget` is false), so their
    /// batches are applied concurrently too: while one start's apply waits for its target's row
    /// lock, other starts' results are committed. Fails when every batch with a target effect
    /// is applied one at a time (the rule before 2026-12-03): the others wait on `effectsLock`.
    func testAnApplyOfStartsWaitingOnALockDoesNotHoldBackOtherStarts() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let (x, first) = try h.remoteStart(t, startTarget: try h.startTarget(t, installation: inst, token: "pts-x"))
        let fake = h.fakeSender()
        fake.hold(first)
        h.dispatcher(fake)
        try eventually("the first start in flight") { fake.isHolding(first) }
        let locker = try holdTargetRowWhileItsApplyWaits(t, x) { fake.release(first) }
        defer { locker.close() }
        let others = try (0..<16).map { i in
            try h.remoteStart(
                t, startTarget: try h.startTarget(t, installation: try h.installation(t), token: "pts-\(i)"), businessKey: "delivery:\(i)"
            ).1
        }
        try assertOthersCommitWhileItWaits(t, first: first, others: others, locker: locker)
        XCTAssertNotEqual(try h.targetRecord(t, x).status.rawValue, "starting", "the start's target effect was applied")
    }

    /// The heartbeat (`DispatchStore.heartbeat`) skips a lease whose row another transaction
    /// holds (an apply finishing it) instead of waiting, and renews the others: waiting would
    /// hold every renewed row's lock and stall the other appliers behind it.
    func testHeartbeatSkipsARowAnotherTransactionHoldsAndRenewsTheRest() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let a = try h.update(t, target: try h.target(t, installation: inst, token: "hb-a"), state: ["eta": 1])
        let b = try h.update(t, target: try h.target(t, installation: inst, token: "hb-b"), state: ["eta": 2])
        let claimed = try h.db.system { c in try DispatchStore.claim(c, worker: "w-hb", limit: 10, leaseSeconds: 5, now: Date()) }
        XCTAssertEqual(Set(claimed.map(\.id)), [a, b])
        let locker = try PostgresConnection(h.conninfo)
        defer { locker.close() }
        try locker.execute("BEGIN")
        try locker.execute("SELECT set_config('app.scope', 'system', true)")
        try locker.execute("SELECT 1 FROM operations WHERE tenant_id = $1 AND id = $2 FOR UPDATE", [t, a])
        let began = Date()
        let renewed = try h.db.system { c in
            try DispatchStore.heartbeat(c, worker: "w-hb", operations: [(t, a), (t, b)], leaseSeconds: 600)
        }
        XCTAssertLessThan(Date().timeIntervalSince(began), 2, "did not wait for the held row")
        XCTAssertEqual(renewed, 1)
        func leaseLeft(_ op: String) throws -> Double {
            try h.row(
                "SELECT EXTRACT(EPOCH FROM lease_expires_at - now())::float8 AS s FROM operations WHERE tenant_id = $1 AND id = $2", [t, op]
            ).double("s")
        }
        XCTAssertGreaterThan(try leaseLeft(b), 500, "the free row was renewed")
        XCTAssertLessThan(try leaseLeft(a), 10, "the held row kept its lease")
        try locker.execute("ROLLBACK")
    }

    func testAWriteInThisProcessIsSeenAtCommitWithItsOperationId() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok")
        let seen = Locked<[(String, String, Date)]>([])
        h.db.addCommitObserver { list, at in seen.withLock { s in for n in list { s.append((n.channel, n.payload, at)) } } }
        let before = Date()
        let op = try h.update(t, target: tgt, state: ["eta": 5])
        let hits = seen.withLock { $0 }.filter { $0.0 == OperationStore.dispatchChannel }
        XCTAssertEqual(hits.map(\.1), ["\(t):\(op)"], "the dispatch wake-up names tenant and operation")
        XCTAssertGreaterThanOrEqual(hits.first?.2 ?? .distantPast, before)
    }

    func testInProcessCommitWakesTheDispatcherWithoutPollingOrNotify() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok")
        var config = DispatchHarness.testConfiguration(worker: "w-inproc")
        config.pollSeconds = 3600  // no poll fallback within this test
        // A dispatcher whose LISTEN connection points nowhere: only the in-process hook can wake it.
        let d = Dispatcher(
            db: h.db, conninfo: "host=/nonexistent dbname=none connect_timeout=1", sender: h.fakeSender(),
            configuration: config, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        d.start()
        // The start-up claim has run and found nothing; the claim loop now waits for a wake-up.
        eventually("first claim done") { h.metrics.render().contains("liverelay_dispatch_claim_seconds_count 1\n") }
        let op = try h.update(t, target: tgt, state: ["eta": 6])
        try h.waitFor(t, op, .accepted, within: 5)
        XCTAssertTrue(h.metrics.render().contains("liverelay_dispatch_lag_seconds_count 1"))
        XCTAssertEqual(d.stats.namedClaimed, 1, "claimed by name, as committed (docs/delivery.md \"Wake-ups\")")
    }

    /// Locks target `x` of tenant `t` in a transaction of its own (the returned connection;
    /// roll it back to let go), runs `release` (lets the held push answer), and waits until its
    /// apply waits on that lock.
    func holdTargetRowWhileItsApplyWaits(_ t: String, _ x: String, release: () -> Void) throws -> PostgresConnection {
        let locker = try PostgresConnection(h.conninfo)
        try locker.execute("BEGIN")
        try locker.execute("SELECT set_config('app.scope', 'system', true)")
        try locker.execute("SELECT 1 FROM targets WHERE tenant_id = $1 AND id = $2 FOR UPDATE", [t, x])
        release()
        try eventually("its apply waits on the target's lock") {
            try h.row(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).int("n") >= 1
        }
        return locker
    }

    /// Within 5 s (well under the 10 s lock_timeout that would end the waiting apply) at least a
    /// batch of `others` is accepted while `first` is still `sending`, its apply waiting on the
    /// row `locker` holds; then the lock is let go and every one is accepted.
    func assertOthersCommitWhileItWaits(_ t: String, first: String, others: [String], locker: PostgresConnection) throws {
        try eventually("a batch of the others applied while the first apply waits", within: 5) {
            try h.row(
                "SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND id = ANY($2::text[]) AND status = 'accepted'",
                [t, PostgresTextArray(others)]
            ).int("n") >= 8
        }
        XCTAssertEqual(try h.operation(t, first).status, .sending, "the first result is still waiting for the lock")
        try locker.execute("ROLLBACK")
        try h.waitFor(t, first, .accepted)
        for op in others { try h.waitFor(t, op, .accepted) }
    }
}
