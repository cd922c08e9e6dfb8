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
        eventually("the first start in flight") { fake.isHolding(first) }
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
        config.claimAtCommit = false  // the named claim is under test (claims at commit: the tests below)
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

    /// docs/delivery.md "Claims at commit": a write in the dispatcher's process claims its own
    /// operation in its transaction. When the write returns, the row is already `sending` under
    /// this dispatcher's lease — no claim transaction ran for it, named or fair — and
    /// it is delivered once, with its lag measured from the commit.
    func testAWriteClaimsItsOperationAtCommit() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-commit")
        var config = DispatchHarness.testConfiguration(worker: "w-commit")
        config.pollSeconds = 3600
        let fake = h.fakeSender()
        let d = Dispatcher(
            db: h.db, conninfo: "host=/nonexistent dbname=none connect_timeout=1", sender: fake,
            configuration: config, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        d.start()
        eventually("first claim done") { h.metrics.render().contains("liverelay_dispatch_claim_seconds_count 1\n") }
        let claimedBefore = d.stats.claimed
        let op = Identifier.make(.operation)
        fake.hold(op)  // so the row is still `sending` when read below
        _ = try h.update(t, target: tgt, state: ["eta": 7], id: op)
        let row = try h.row("SELECT status, lease_owner FROM operations WHERE tenant_id = $1 AND id = $2", [t, op])
        XCTAssertEqual(try row.string("status"), "sending", "claimed by the write itself")
        XCTAssertEqual(try row.optionalString("lease_owner"), "w-commit")
        fake.release(op)
        try h.waitFor(t, op, .accepted, within: 5)
        XCTAssertEqual(d.stats.claimedAtCommit, 1)
        XCTAssertEqual(d.stats.claimed, claimedBefore, "no claim transaction took it, named or fair")
        XCTAssertEqual(fake.calls.map(\.push.operationId), [op], "delivered once")
        XCTAssertTrue(h.metrics.render().contains("liverelay_dispatch_lag_seconds_count 1"))
        XCTAssertTrue(h.metrics.render().contains("liverelay_dispatch_claimed_at_commit_total 1\n"))
        XCTAssertEqual(d.commitClaimsLent, 0)
    }

    /// Claims at commit borrow at most half of the outstanding slots (8 here: 4 threads of a
    /// blocking sender), so the fair claim always has the other half for every tenant's queue;
    /// a write whose transaction rolls back after its claim gives the slot back and hands over
    /// nothing (its operation never existed).
    func testClaimsAtCommitBorrowHalfTheSlotsAndRollbacksGiveThemBack() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let fake = h.fakeSender()
        let d = h.dispatcher(fake)
        XCTAssertEqual(d.maxOutstanding, 8)
        let targets = try (0..<6).map { i in try h.target(t, installation: inst, token: "half-\(i)") }
        var ops: [String] = []
        for (i, tgt) in targets.enumerated() {
            let op = Identifier.make(.operation)
            fake.hold(op)
            ops.append(op)
            _ = try h.update(t, target: tgt, state: ["eta": .int(Int64(i))], id: op)
        }
        // The held sends keep the 4 sender threads (a blocking sender), so 4 are in flight.
        eventually("four in flight") { ops.filter { fake.isHolding($0) }.count == 4 }
        XCTAssertEqual(d.stats.claimedAtCommit, 4, "half of the 8 slots; the fair or named claim takes the other two")

        struct Refused: Error {}
        let rolledBack = Identifier.make(.operation)
        let extra = try h.target(t, installation: inst, token: "half-rolled-back")
        for op in ops { fake.release(op) }
        try eventually("the six accepted") { try ops.allSatisfy { try h.operation(t, $0).status == .accepted } }
        XCTAssertThrowsError(
            try h.db.tenant(t) { c in
                try h.writeUpdate(c, t, target: extra, state: ["eta": 9], id: rolledBack)
                throw Refused()
            })
        XCTAssertEqual(d.commitClaimsLent, 0, "the slot came back")
        XCTAssertEqual(d.stats.claimedAtCommit, 4, "nothing handed over")
        XCTAssertEqual(try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND id = $2", [t, rolledBack]).int("n"), 0)
        XCTAssertFalse(fake.calls.contains { $0.push.operationId == rolledBack })
    }

    /// Migration 0027 and `CommitClaim.read`: the insert of the operation a transaction claims at
    /// commit does not refresh its target's dispatch head (no row right after the insert), and
    /// when the claim does not take it (here its target was found over), the write refreshes
    /// the head itself before COMMIT, so the dispatcher still finds the operation and cancels
    /// it (reason `target_ended`). Without that refresh the operation would stay queued with no
    /// head row, claimed by nobody but a named claim (off here).
    func testAClaimAtCommitThatTakesNothingLeavesTheHeadForTheDispatcher() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-over")
        var config = DispatchHarness.testConfiguration(worker: "w-over")
        config.claimNamedOperations = false  // only `dispatch_heads` can lead the dispatcher to the operation
        let d = Dispatcher(db: h.db, conninfo: h.conninfo, sender: h.fakeSender(), configuration: config, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        d.start()
        let op = Identifier.make(.operation)
        let headAfterInsert = try h.db.tenant(t) { c -> Int in
            let claim = try XCTUnwrap(CommitClaim.begin(c, db: h.db))
            let prelude = claim.prelude(operationId: op)
            try c.execute(prelude.sql, prelude.params)
            let seq = try TargetStore.nextSeq(c, tenantId: t, id: tgt)
            _ = try OperationStore.insert(
                c, tenantId: t,
                OperationStore.New(
                    id: op, targetId: tgt, seq: seq, kind: .update, revision: 2, state: ["eta": 1], alert: nil, options: WriteOptions(),
                    consumesQuota: false, quotaDay: nil, createdByKeyId: nil, idempotencyKey: op))
            let heads = try c.query("SELECT count(*) AS n FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, tgt])[0].int("n")
            try c.execute("UPDATE targets SET status = 'ended', ended_at = now() WHERE tenant_id = $1 AND id = $2", [t, tgt])
            let claimed = try c.pipeline([claim.claim(tenantId: t, operationId: op)]).get()
            let before = try claim.read(claimed[0], tenantId: t, targetId: tgt)
            XCTAssertFalse(claim.claimedAny)
            XCTAssertEqual(before.count, 1, "the head refresh the insert left out")
            for st in before { try c.execute(st.sql, st.params) }
            return heads
        }
        XCTAssertEqual(headAfterInsert, 0, "the insert of the claimed operation did not refresh its head")
        try h.waitFor(t, op, .cancelled, within: 10)
        XCTAssertEqual(try h.operation(t, op).pendingReason, "target_ended")
        XCTAssertEqual(d.stats.claimedAtCommit, 0)
        XCTAssertEqual(d.commitClaimsLent, 0)
    }

    /// A claim at commit whose COMMIT's outcome is unknown (`Database.run` calls `rolledBack`
    /// when the connection broke after COMMIT was sent) although the transaction did commit:
    /// the operation it claimed is `sending` under this worker's lease but was never handed over.
    /// Releasing the slot with what the claim took puts it back in the queue, so it is sent at
    /// once instead of waiting for its lease to expire (and, as a start or an alert, ending
    /// `unknown` without ever being sent).
    func testAReleasedClaimAtCommitThatCommittedAfterAllIsSentAtOnce() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-in-doubt")
        let fake = h.fakeSender()
        let d = h.dispatcher(fake, lease: 600)  // a lease expiry would take ten minutes
        // The write, on a connection of its own: COMMIT succeeds, but no `Database.run` runs its hook.
        let c = try PostgresConnection(h.conninfo)
        defer { c.close() }
        try c.execute("BEGIN")
        try c.execute("SELECT set_config('app.scope', 'system', true)")
        let claim = try XCTUnwrap(CommitClaim.begin(c, db: h.db))
        XCTAssertEqual(d.commitClaimsLent, 1)
        let op = Identifier.make(.operation)
        h.targetOfOperation.m.withLock { $0[op] = tgt }
        let prelude = claim.prelude(operationId: op)
        try c.execute(prelude.sql, prelude.params)
        let seq = try TargetStore.nextSeq(c, tenantId: t, id: tgt)
        let insert = OperationStore.insertStatement(
            tenantId: t,
            OperationStore.New(
                id: op, targetId: tgt, seq: seq, kind: .update, revision: 2, state: ["eta": 3], alert: nil, options: WriteOptions(),
                consumesQuota: false, quotaDay: nil, createdByKeyId: nil, idempotencyKey: op))
        _ = try c.query(insert.sql, insert.params)
        let claimed = try c.pipeline([claim.claim(tenantId: t, operationId: op)]).get()
        XCTAssertEqual(try claim.read(claimed[0], tenantId: t, targetId: tgt).count, 0)
        XCTAssertTrue(claim.claimedAny)
        try c.execute("COMMIT")
        XCTAssertEqual(try h.operation(t, op).status, .sending, "committed as sending, never handed over")

        for hook in c.takeTransactionHooks() { hook.rolledBack() }  // what `Database.run` does when COMMIT's reply was lost
        XCTAssertEqual(d.commitClaimsLent, 0)
        try h.waitFor(t, op, .accepted, within: 10)
        XCTAssertEqual(fake.calls.map(\.push.operationId), [op], "sent once, after it went back to the queue")
        XCTAssertEqual(d.stats.claimedAtCommit, 0)
    }

    /// A claim at commit whose COMMIT returns more than half a lease after the claim (a stalled
    /// server or standby; here the transaction sleeps) is not handed over: the lease can no
    /// longer be trusted, so the operation goes back to the queue (fenced) and is sent once, by
    /// the fair claim or the lease rescue, never twice.
    func testAClaimAtCommitThatCommitsTooLateIsNotHandedOver() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-late")
        let fake = h.fakeSender()
        let d = h.dispatcher(fake, lease: 0.6)
        let op = Identifier.make(.operation)
        try h.db.tenant(t) { c in
            try h.writeUpdate(c, t, target: tgt, state: ["eta": 5], id: op)
            Thread.sleep(forTimeInterval: 0.5)  // COMMIT comes 0.5 s after the claim: over half the 0.6 s lease
        }
        XCTAssertEqual(d.stats.claimedAtCommit, 0, "not handed over")
        XCTAssertEqual(d.commitClaimsLent, 0, "the slot came back")
        try h.waitFor(t, op, .accepted, within: 10)
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(fake.calls.filter { $0.push.operationId == op }.count, 1, "sent once")
    }

    /// A fair claim that takes more than half a lease (here its clock stamp waits 0.5 s on a
    /// row lock another transaction holds; lease 0.6 s) is not handed over: its lease could run
    /// out while the push is in flight and a rescue would then requeue it or give up on it. It
    /// goes back to the queue (fenced) and is sent once, by a later claim.
    func testAFairClaimThatTakesMoreThanHalfALeaseIsNotHandedOver() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-slow-claim")
        _ = try h.db.system { c in
            try c.execute("INSERT INTO target_clocks (tenant_id, target_id, last_timestamp) VALUES ($1, $2, 1)", [t, tgt])
        }
        let op = try h.update(t, target: tgt, state: ["eta": 1])  // no dispatcher yet: nothing claims at commit
        let held = DispatchSemaphore(value: 0), released = DispatchSemaphore(value: 0)
        let db = h.db
        Thread {
            _ = try? db.system { c in
                _ = try c.query("SELECT 1 AS one FROM target_clocks WHERE tenant_id = $1 AND target_id = $2 FOR UPDATE", [t, tgt])
                held.signal()
                Thread.sleep(forTimeInterval: 0.5)
            }
            released.signal()
        }.start()
        held.wait()
        let fake = h.fakeSender()
        let d = h.dispatcher(fake, lease: 0.6)
        XCTAssertEqual(released.wait(timeout: .now() + 10), .success)
        try h.waitFor(t, op, .accepted, within: 10)
        XCTAssertGreaterThanOrEqual(d.stats.returnedSlowClaims, 1, "the claim that waited 0.5 s was not handed over")
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(fake.calls.filter { $0.push.operationId == op }.count, 1, "sent once")
    }

    /// A result whose apply loses its database connection (a trigger terminates its own
    /// session until the test lifts the block, as a failover would) is kept and applied again:
    /// the provider accepted the push, so the operation ends `accepted`, not `unknown` through
    /// the lease rescue after a short database failure.
    func testAResultWhoseApplyFailsIsAppliedAgain() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-apply-retry")
        let op = Identifier.make(.operation)
        try h.db.system { c in
            try c.execute("CREATE TABLE test_apply_block (id text PRIMARY KEY)")
            try c.execute("INSERT INTO test_apply_block VALUES ($1)", [op])
            try c.execute(
                """
                CREATE FUNCTION test_apply_block() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.status = 'accepted' AND EXISTS (SELECT 1 FROM test_apply_block b WHERE b.id = NEW.id) THEN
                    PERFORM pg_terminate_backend(pg_backend_pid());  -- the connection is lost mid-apply
                  END IF;
                  RETURN NEW;
                END $$
                """)
            try c.execute("CREATE TRIGGER test_apply_block BEFORE UPDATE ON operations FOR EACH ROW EXECUTE FUNCTION test_apply_block()")
        }
        defer {
            _ = try? h.db.system { c in
                try c.execute("DROP TRIGGER test_apply_block ON operations")
                try c.execute("DROP FUNCTION test_apply_block()")
                try c.execute("DROP TABLE test_apply_block")
            }
        }
        let fake = h.fakeSender()
        let d = h.dispatcher(fake)
        _ = try h.update(t, target: tgt, state: ["eta": 1], id: op)
        eventually("the apply failed and is tried again") { d.stats.applyRetries >= 2 }
        XCTAssertEqual(try h.operation(t, op).status, .sending, "not applied, not given up")
        _ = try h.db.system { c in try c.execute("DELETE FROM test_apply_block") }
        try h.waitFor(t, op, .accepted, within: 10)
        XCTAssertEqual(fake.calls.filter { $0.push.operationId == op }.count, 1, "sent once, applied once it could be")
    }

    /// `DispatchStore.unclaim` fenced by the claim's `sent_at` (`DispatchOperation.claimedAt`):
    /// a return meant for one claim never touches a later claim of the same operation, so the
    /// dispatcher may put back, late or twice, what a claim whose COMMIT's outcome is unknown
    /// took (docs/delivery.md "Claims") without ever requeueing an operation in flight.
    func testAFencedUnclaimReturnsOnlyTheClaimItNames() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "tok-fence")
        let op = try h.update(t, target: tgt, state: ["eta": 1])
        func claim() throws -> DispatchOperation {
            try XCTUnwrap(
                try h.db.system { c in
                    try DispatchStore.claim(c, worker: "w-fence", ids: [(t, op)], limit: 1, leaseSeconds: 30, now: Date())
                }.first)
        }
        func unclaim(_ stamp: String?) throws -> Int {
            try h.db.system { c in try DispatchStore.unclaim(c, worker: "w-fence", operations: [(t, op)], claimedAt: stamp) }
        }
        let first = try claim()
        let firstStamp = try XCTUnwrap(first.claimedAt)
        XCTAssertEqual(try unclaim(firstStamp), 1, "the claim's own return")
        XCTAssertEqual(try h.operation(t, op).status, .queued)
        let second = try claim()
        XCTAssertNotEqual(second.claimedAt, firstStamp)
        XCTAssertEqual(second.attempts, 1, "the returned attempt was not counted")
        XCTAssertEqual(try unclaim(firstStamp), 0, "a late return of the first claim leaves the second alone")
        XCTAssertEqual(try h.operation(t, op).status, .sending)
        XCTAssertEqual(try unclaim(second.claimedAt), 1)
    }

    /// A write holding target `target` of tenant `t` (as `lockForWrite` does) while `other` runs
    /// on a thread of its own, then locking the target's queued operations: asserts the write
    /// went ahead at once (`other` waits for the target), commits, and returns `other`'s result.
    /// When `other` locked the operation first and then waited for the target, the two
    /// deadlocked until PostgreSQL's deadlock check (deadlock_timeout, 1 s) aborted one of them.
    func resultAfterAWriteGoesFirst(
        tenant t: String, target: String, _ other: @escaping @Sendable () throws -> Int, line: UInt = #line
    ) throws -> Int {
        let writer = try PostgresConnection(h.conninfo)
        defer { writer.close() }
        try writer.execute("BEGIN")
        try writer.execute("SELECT set_config('app.scope', 'system', true)")
        _ = try writer.query("SELECT 1 AS one FROM targets WHERE tenant_id = $1 AND id = $2 FOR UPDATE", [t, target])
        let result = Locked<Result<Int, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let r = Result { try other() }
            result.withLock { $0 = r }
            done.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.3)  // `other` waits for the target's row by now
        let began = Date()
        XCTAssertNoThrow(
            try writer.query("SELECT 1 AS one FROM operations WHERE tenant_id = $1 AND target_id = $2 FOR UPDATE", [t, target]),
            "the write locks its queued operations without a deadlock", line: line)
        XCTAssertLessThan(Date().timeIntervalSince(began), 0.5, "the write did not wait", line: line)
        try writer.execute("COMMIT")
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, line: line)
        return try XCTUnwrap(result.withLock { $0 }, line: line).get()
    }

    /// A queued update of a new target of tenant `t`, parked (`token_pending`).
    func parkedUpdate(_ t: String, installation inst: String, token: String?, platform: String = "ios") throws -> (target: String, op: String) {
        let tgt = try h.target(t, installation: inst, token: token, platform: platform)
        let op = try h.update(t, target: tgt, state: ["eta": 1])  // no dispatcher: it stays queued
        _ = try h.db.system { c in
            try c.execute("UPDATE operations SET pending_reason = 'token_pending' WHERE tenant_id = $1 AND id = $2", [t, op])
        }
        return (tgt, op)
    }

    /// The un-park sweep locks a target before its operations, the order writes take: a write
    /// holding the target and then locking its queued operations goes ahead while the sweep
    /// waits for the target. When the sweep updated the operation first (its dispatch-head
    /// trigger then waited for the target), the two deadlocked.
    func testTheUnparkSweepLocksTheTargetBeforeItsOperations() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let (tgt, _) = try parkedUpdate(t, installation: inst, token: "tok-lock-order")
        let db = h.db
        let swept = try resultAfterAWriteGoesFirst(tenant: t, target: tgt) { try db.system { c in try DispatchStore.unparkTokenPending(c) } }
        XCTAssertEqual(swept, 1, "the sweep un-parked it after the write")
    }

    /// An installation's new FCM token un-parks its targets' operations (migration 0033) after
    /// locking those targets: a write holding one of them and then locking its queued operations
    /// goes ahead while the token's trigger waits. Before, the trigger locked the parked
    /// operation first and then waited for the target: the two deadlocked until PostgreSQL's
    /// deadlock check aborted one (an API request or the device's registration).
    func testAnFCMTokenLocksTheTargetsBeforeTheirOperations() throws {
        let t = try h.tenant(), inst = try h.installation(t, platform: "android")
        let (tgt, op) = try parkedUpdate(t, installation: inst, token: nil, platform: "android")
        let db = h.db
        let registered = try resultAfterAWriteGoesFirst(tenant: t, target: tgt) {
            try db.system { c in try c.execute("UPDATE installations SET fcm_token = 'fcm-new' WHERE tenant_id = $1 AND id = $2", [t, inst]) }
        }
        XCTAssertEqual(registered, 1, "the registration committed")
        XCTAssertEqual(
            try h.row("SELECT pending_reason IS NULL AS unparked FROM operations WHERE tenant_id = $1 AND id = $2", [t, op]).bool("unparked"), true,
            "and un-parked the operation")
    }

    /// The re-check after a claim that parked (`DispatchStore.parkedRows`, `unparkIfTokenReady`):
    /// a claim reports what it parked; once the token is there but the operation is still
    /// parked (a registration that committed while the claim was parking it un-parked nothing),
    /// the re-check un-parks it and its dispatch head comes back; with no token it does nothing.
    func testAReCheckAfterAClaimUnparksWhatGotItsTokenMeanwhile() throws {
        let t = try h.tenant(), inst = try h.installation(t, platform: "android")
        let tgt = try h.target(t, installation: inst, token: nil, platform: "android")
        let op = try h.update(t, target: tgt, state: ["eta": 1])
        let parked = try h.db.system { c in
            try DispatchStore.claimNamed(c, worker: "w-park", ids: [(t, op)], limit: 1, leaseSeconds: 30, now: Date())
        }
        XCTAssertTrue(parked.claimed.isEmpty)
        XCTAssertEqual(parked.parked.map(\.id), [op])
        func pending() throws -> String? {
            try h.row("SELECT pending_reason FROM operations WHERE tenant_id = $1 AND id = $2", [t, op]).optionalString("pending_reason")
        }
        XCTAssertEqual(try pending(), "token_pending")
        XCTAssertEqual(try h.db.system { c in try DispatchStore.unparkIfTokenReady(c, operations: parked.parked) }, 0, "no token yet")
        // The race's outcome: the token is registered, the operation still parked.
        _ = try h.db.system { c in
            try c.execute("UPDATE installations SET fcm_token = 'fcm-late' WHERE tenant_id = $1 AND id = $2", [t, inst])
            try c.execute("UPDATE operations SET pending_reason = 'token_pending' WHERE tenant_id = $1 AND id = $2", [t, op])
        }
        XCTAssertEqual(try h.db.system { c in try DispatchStore.unparkIfTokenReady(c, operations: parked.parked) }, 1)
        XCTAssertNil(try pending())
        XCTAssertEqual(try h.row("SELECT count(*) AS n FROM dispatch_heads WHERE tenant_id = $1 AND operation_id = $2", [t, op]).int("n"), 1)
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
