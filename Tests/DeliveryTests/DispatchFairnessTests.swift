import Foundation
import XCTest
import Delivery
import JSON
import LiveRelayCore
import LiveRelaySandbox
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// Fair claims (docs/delivery.md "Claims"): one candidate per target, claims shared across
/// tenants, a never-sendable target parks once and stays out of the way, duplicate cleanups
/// collapse. Real PostgreSQL; the end-to-end case also the sandbox over real HTTP/2.
final class DispatchFairnessTests: DispatchTestCase {

    /// Seconds from now until the sandbox got an APNs push for `token` (polled every 2 ms for
    /// up to 10 s); nil when none came.
    func secondsUntilDelivered(_ ph: ProviderHarness, token: String) -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < 10 {
            if !ph.sandbox.deliveries(token: token, provider: "apns").isEmpty { return Date().timeIntervalSince(start) }
            Thread.sleep(forTimeInterval: 0.002)
        }
        return nil
    }

    /// Tenant A's backlog: 1,000 ready iOS targets with 100 queued updates each (100,000 queued
    /// operations), plus an `ending` local target that never registered its update token and
    /// holds 600 queued stateless ends (as left by a client retrying cleanups before ends
    /// collapsed). Returns the ending target's id.
    @discardableResult
    func loadBacklog(_ a: String, installation inst: String) throws -> String {
        try h.db.tenant(a) { c in
            let day = QuotaStore.day(Date())
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status, op_seq)
                SELECT $1, 'tgt_a' || lpad(g::text, 6, '0'), $2, 'local', 'delivery', 'tv_test', 'ready', 2, '{"eta": 1}'::jsonb,
                       lpad(to_hex(g), 64, '0'), 'registered', 100
                  FROM generate_series(1, 1000) g
                """, [a, inst])
            try c.execute(
                """
                INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, state, priority, consumes_quota, quota_day)
                SELECT $1, 'op_a' || lpad(g::text, 7, '0'), 'tgt_a' || lpad(((g - 1) / 100 + 1)::text, 6, '0'), (g - 1) % 100 + 1,
                       'update', 'queued', 2, true, '{"eta": 1}'::jsonb, 10, true, $2::date
                  FROM generate_series(1, 100000) g
                """, [a, day])
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status, op_seq)
                VALUES ($1, 'tgt_a_ending', $2, 'local', 'delivery', 'tv_test', 'ending', 1, '{"eta": 1}'::jsonb, NULL, 'pending', 600)
                """, [a, inst])
            try c.execute(
                """
                INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, priority, consumes_quota,
                                        next_attempt_at)
                SELECT $1, 'op_e' || lpad(g::text, 4, '0'), 'tgt_a_ending', g, 'end', 'queued', 1, false, 10, false,
                       now() - interval '1 minute'  -- due before all of A's updates: the first candidate of A
                  FROM generate_series(1, 600) g
                """, [a])
            try c.execute("ANALYZE operations"); try c.execute("ANALYZE targets"); try c.execute("ANALYZE dispatch_heads")
        }
        return "tgt_a_ending"
    }

    func testClaimTakesOneHeadPerTargetAndSharesTheClaimAcrossTenants() throws {
        let a = try h.tenant(quota: 10_000_000), instA = try h.installation(a)
        let ending = try loadBacklog(a, installation: instA)
        let b = try h.tenant(), instB = try h.installation(b)
        let tgtB = try h.target(b, installation: instB, token: String(repeating: "b", count: 64))
        let opB = try h.update(b, target: tgtB, state: ["eta": 2])
        XCTAssertEqual(try h.row("SELECT count(*) AS n FROM dispatch_heads").int("n"), 1002, "one head per target with work")

        for round in 0..<3 {
            let claimed = try h.db.system { c in
                try DispatchStore.claim(c, worker: "w", limit: 8, leaseSeconds: 30, now: Date(), rotation: round)
            }
            // Round 0: A's first candidate is the ending target's head, which is parked instead of sent.
            XCTAssertEqual(claimed.count, round == 0 ? 7 : 8, "round \(round)")
            XCTAssertEqual(Set(claimed.map(\.targetId)).count, claimed.count, "at most one operation per target")
            XCTAssertFalse(claimed.contains { $0.targetId == ending }, "a target without token is never claimed")
            if round == 0 {
                XCTAssertTrue(claimed.contains { $0.id == opB }, "tenant B's only update is in the first claim")
                XCTAssertEqual(claimed.filter { $0.tenantId == a }.count, 6)
            }
            for op in claimed where op.tenantId == a { XCTAssertEqual(op.seq, 1, "the head of its target's queue (commit order)") }
        }
        // The ending target's head was parked once; its other 599 ends were never touched.
        let parked = try h.row("SELECT count(*) AS n FROM operations WHERE target_id = $1 AND pending_reason = 'token_pending'", [ending]).int("n")
        XCTAssertEqual(parked, 1)
        XCTAssertEqual(
            try h.row("SELECT count(*) AS n FROM dispatch_heads WHERE target_id = $1", [ending]).int("n"), 0,
            "a parked head leaves the claim queue")
        XCTAssertEqual(try h.row("SELECT count(*) AS n FROM operations WHERE status = 'sending'").int("n"), 23)
    }

    /// `claim(ids:)` (docs/delivery.md "Wake-ups"): only named operations that are their target's
    /// due head are claimed; a named operation behind another of its target waits, and an
    /// unnamed head is left for the fair claim.
    func testClaimByIdsTakesOnlyNamedDueHeads() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let x = try h.target(t, installation: inst, token: String(repeating: "1", count: 64))
        let y = try h.target(t, installation: inst, token: String(repeating: "2", count: 64))
        let z = try h.target(t, installation: inst, token: String(repeating: "3", count: 64))
        let alert = PushAlert(title: "t", body: "b", sound: nil)
        let x1 = try h.update(t, target: x, state: ["eta": 1], alert: alert)  // alerts are never coalesced: x keeps two
        let x2 = try h.update(t, target: x, state: ["eta": 2], alert: alert)
        let y1 = try h.update(t, target: y, state: ["eta": 3])
        let z1 = try h.update(t, target: z, state: ["eta": 4])
        func claim(_ ids: [String], limit: Int = 10) throws -> [String] {
            try h.db.system { c in
                try DispatchStore.claim(c, worker: "w", ids: ids.map { (t, $0) }, limit: limit, leaseSeconds: 30, now: Date()).map(\.id)
            }
        }
        XCTAssertEqual(try claim([x2, y1]), [y1], "x2 is behind x1: not its target's head")
        XCTAssertEqual(try claim([y1]), [], "already in flight")
        XCTAssertEqual(try claim([x1, x2]).sorted(), [x1], "one in flight per target")
        XCTAssertEqual(try claim([x2]), [], "x1 is in flight")
        XCTAssertEqual(try claim(["op_unknown"]), [])
        XCTAssertEqual(try h.row("SELECT status FROM operations WHERE id = $1", [z1]).string("status"), "queued", "unnamed: left for the fair claim")
        XCTAssertEqual(try h.row("SELECT count(*) AS n FROM dispatch_heads WHERE tenant_id = $1", [t]).int("n"), 1, "only z's head is claimable")
        let fair = try h.db.system { c in try DispatchStore.claim(c, worker: "w", limit: 10, leaseSeconds: 30, now: Date()).map(\.id) }
        XCTAssertEqual(fair, [z1])
    }

    func testTenantBsUpdateIsSentWithinOneSecondBehindTenantAsBacklog() throws {
        let a = try h.tenant(quota: 10_000_000), instA = try h.installation(a)
        try loadBacklog(a, installation: instA)
        let b = try h.tenant(), instB = try h.installation(b)
        let tokenB = ProviderHarness.hexToken("tenant-b")
        let tgtB = try h.target(b, installation: instB, token: tokenB)

        let ph = try ProviderHarness()
        defer { ph.tearDown() }
        let creds = try ph.source.credentials(tenantId: ProviderHarness.tenant)
        ph.source.set(a, creds); ph.source.set(b, creds)
        h.dispatcher(ph.sender)
        // The dispatcher is busy with tenant A before B writes.
        eventually("tenant A is being delivered", within: 30) { ph.sandbox.deliveries(provider: "apns").count >= 50 }

        try h.update(b, target: tgtB, state: ["eta": 3])
        let sentAfter = secondsUntilDelivered(ph, token: tokenB)
        let delivered = ph.sandbox.deliveries(token: tokenB, provider: "apns")
        XCTAssertEqual(delivered.count, 1, "tenant B's update reached the sandbox once")
        XCTAssertEqual(delivered.first?.status, 200)
        XCTAssertLessThanOrEqual(sentAfter ?? 99, 1.0, "tenant B's update waited behind tenant A's backlog")
    }

    /// Tenant A's provider requests hang (each answer of the sandbox takes 5 s for A's tokens),
    /// and A has more queued work than the dispatcher has outstanding slots (8 here): A holds at
    /// most its share of the slots (all but the reserve for other tenants, 2 of 8 here, while it
    /// is alone), so tenant B's update still finds a slot and is sent at once, not after A's
    /// requests time out (docs/delivery.md "Claims").
    func testATenantWhoseRequestsHangHoldsAtMostItsShareOfTheSlots() throws {
        let a = try h.tenant(quota: 10_000), instA = try h.installation(a)
        let b = try h.tenant(), instB = try h.installation(b)
        let ph = try ProviderHarness()
        defer { ph.tearDown() }
        let creds = try ph.source.credentials(tenantId: ProviderHarness.tenant)
        ph.source.set(a, creds); ph.source.set(b, creds)
        for i in 0..<24 {
            let token = ProviderHarness.hexToken("hanging-\(i)")
            _ = ph.sandbox.addFault(SandboxFault(provider: "apns", token: token, delaySeconds: 5))
            try h.update(a, target: try h.target(a, installation: instA, token: token), state: ["eta": .int(Int64(i))])
        }
        var configuration = DispatchHarness.testConfiguration(worker: "worker-share")
        configuration.maxOutstanding = 8
        configuration.maxOutstandingIsExplicit = true
        let d = Dispatcher(db: h.db, conninfo: h.conninfo, sender: ph.sender, configuration: configuration, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        d.start()
        eventually("tenant A's requests hang in flight", within: 10) { d.streamsInFlight.now >= 6 }
        Thread.sleep(forTimeInterval: 0.3)  // A's claims had every chance to take more slots
        XCTAssertEqual(d.outstandingCount, 6, "tenant A holds 6 of the 8 slots, no more")

        let tokenB = ProviderHarness.hexToken("tenant-b-share")
        let tgtB = try h.target(b, installation: instB, token: tokenB)
        try h.update(b, target: tgtB, state: ["eta": 1])
        let sentAfter = secondsUntilDelivered(ph, token: tokenB)
        XCTAssertLessThanOrEqual(sentAfter ?? 99, 1.0, "tenant B's update waited behind tenant A's hanging requests")
    }

    /// Slots lent to fan-out batches (docs/delivery.md "Claims at fan-out"): at most half of
    /// the outstanding slots, shared with claims at commit, so the fair and named claims keep
    /// the other half; released or taken, they are free again.
    func testFanoutBatchesBorrowAtMostHalfTheSlotsAndGiveThemBack() throws {
        var configuration = DispatchHarness.testConfiguration(worker: "worker-fanout-lend")
        configuration.maxOutstanding = 64
        configuration.maxOutstandingIsExplicit = true
        let d = Dispatcher(db: h.db, conninfo: h.conninfo, sender: h.fakeSender(), configuration: configuration, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        XCTAssertNil(d.reserveFanoutClaim(tenantId: "ten_a", want: 10), "not running: nothing lent")
        d.start()
        let first = try XCTUnwrap(d.reserveFanoutClaim(tenantId: "ten_a", want: 1_000))
        XCTAssertEqual(first.slots, 32, "half of 64")
        XCTAssertEqual(first.terms.worker, "worker-fanout-lend")
        XCTAssertNil(d.reserveFanoutClaim(tenantId: "ten_b", want: 1), "the other half stays with the fair claims")
        XCTAssertNil(d.reserveCommitClaim(), "claims at commit share the lent half")
        d.releaseFanoutClaim(claimed: [], tenantId: "ten_a", lent: first.slots)
        XCTAssertEqual(d.commitClaimsLent, 0)
        let second = try XCTUnwrap(d.reserveFanoutClaim(tenantId: "ten_b", want: 5))
        XCTAssertEqual(second.slots, 5, "no more than asked for")
        XCTAssertEqual(d.commitClaimsLent, 5)
        d.takeFanoutClaim([], tenantId: "ten_b", lent: second.slots)
        XCTAssertEqual(d.commitClaimsLent, 0)
        XCTAssertEqual(d.outstandingCount, 0)
    }

    func testAQueuedEndSupersedesOlderQueuedEnds() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: nil)  // never registers its update token
        let first = try h.end(t, target: tgt)
        let second = try h.end(t, target: tgt)
        let third = try h.end(t, target: tgt)
        XCTAssertEqual(try h.operation(t, first).status, .superseded)
        XCTAssertEqual(try h.operation(t, first).supersededBy, second)
        XCTAssertEqual(try h.operation(t, second).status, .superseded)
        XCTAssertEqual(try h.operation(t, second).supersededBy, third, "superseded_by names the newer end")
        XCTAssertEqual(try h.operation(t, third).status, .queued)
        XCTAssertEqual(
            try h.row("SELECT operation_id FROM dispatch_heads WHERE target_id = $1", [tgt]).string("operation_id"), third,
            "the newest end is the head of the queue")
        XCTAssertEqual(
            try h.row("SELECT due_at::text AS d FROM dispatch_heads WHERE target_id = $1", [tgt]).string("d"),
            try h.row("SELECT next_attempt_at::text AS d FROM operations WHERE id = $1", [first]).string("d"),
            "the head keeps the place of the first end (migration 0040: superseding does not send a target to the back)")
    }

    /// Migration 0022: an insert behind an older live operation leaves the head to that
    /// operation; the change of the older one (here its acceptance after a claim) moves the head
    /// to the inserted one. Statuses are set by SQL, as the claim and the apply set them.
    func testAnInsertBehindALiveOperationLeavesTheHeadToItsChange() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: String(repeating: "ab", count: 32))
        func head() throws -> String? {
            try h.db.system { c in
                try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, tgt]).first?.string("operation_id")
            }
        }
        let first = try h.update(t, target: tgt, state: ["eta": 2])
        XCTAssertEqual(try head(), first, "the first operation is the head")
        try h.db.tenant(t) { c in
            try c.execute("UPDATE operations SET status = 'sending' WHERE tenant_id = $1 AND id = $2", [t, first])
        }
        XCTAssertNil(try head(), "a target with an operation in flight has no claimable head")
        let second = try h.update(t, target: tgt, state: ["eta": 3])
        XCTAssertNotEqual(second, first)
        XCTAssertEqual(try h.operation(t, second).status, .queued, "an update does not supersede an operation in flight")
        XCTAssertNil(try head(), "the insert behind the operation in flight leaves the target without a head")
        try h.db.tenant(t) { c in
            try c.execute("UPDATE operations SET status = 'accepted', accepted_at = now() WHERE tenant_id = $1 AND id = $2", [t, first])
        }
        XCTAssertEqual(try head(), second, "the older operation's acceptance makes the inserted one the head")
        let third = try h.update(t, target: tgt, state: ["eta": 4])
        XCTAssertEqual(try h.operation(t, second).supersededBy, third)
        XCTAssertEqual(try head(), third, "an update's supersede moves the head to the newest operation")
    }
    /// Migration 0040: an update refreshes its target's head itself (`WritePath.refreshHead`),
    /// and the head triggers leave its insert and supersede alone. After updates in every
    /// shape of queue — empty, a queued state-only update to supersede, a queued alert that
    /// stays ahead, an operation in flight, a queue waiting for the token — `dispatch_heads`
    /// holds exactly the heads a full recomputation by `lr_dispatch_heads_refresh_set` gives,
    /// and a head that superseded another keeps its place (its `due_at`).
    func testHeadsRefreshedByTheWriterEqualAFullRecomputation() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let empty = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        let coalesced = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        let behindAlert = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        let inFlight = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        let waiting = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        func head(_ target: String) throws -> String? { try h.headOperation(t, target) }
        let onEmpty = try h.update(t, target: empty, state: ["eta": 1])
        XCTAssertEqual(try head(empty), onEmpty, "an update on an empty queue is its target's head")
        let oldest = try h.update(t, target: coalesced, state: ["eta": 1])
        let newest = try h.update(t, target: coalesced, state: ["eta": 2])
        XCTAssertEqual(try head(coalesced), newest, "the update that supersedes the queued one is the head")
        let firstDue = try h.row("SELECT next_attempt_at::text AS d FROM operations WHERE tenant_id = $1 AND id = $2", [t, oldest]).string("d")
        XCTAssertLessThan(
            firstDue, try h.row("SELECT next_attempt_at::text AS d FROM operations WHERE tenant_id = $1 AND id = $2", [t, newest]).string("d"))
        XCTAssertEqual(
            try h.row("SELECT due_at::text AS d FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, coalesced]).string("d"), firstDue,
            "the head keeps the superseded operation's place in the tenant's queue")
        let alert = try h.update(t, target: behindAlert, state: ["eta": 1], alert: PushAlert(title: "Order", body: "Picked up"))
        let behind = try h.update(t, target: behindAlert, state: ["eta": 2])
        XCTAssertEqual(try h.operation(t, alert).status, .queued, "an alert is never superseded")
        XCTAssertEqual(try head(behindAlert), alert, "the queued alert stays ahead of the newer update")
        XCTAssertEqual(try h.operation(t, behind).status, .queued)
        let sent = try h.update(t, target: inFlight, state: ["eta": 1])
        try h.db.tenant(t) { c in
            try c.execute("UPDATE operations SET status = 'sending' WHERE tenant_id = $1 AND id = $2", [t, sent])
        }
        _ = try h.update(t, target: inFlight, state: ["eta": 2])
        XCTAssertNil(try head(inFlight), "an update behind an operation in flight makes no head")
        let parked = try h.update(t, target: waiting, state: ["eta": 1], alert: PushAlert(title: "Order", body: "Late"))
        try h.db.tenant(t) { c in
            try c.execute("UPDATE operations SET pending_reason = 'token_pending' WHERE tenant_id = $1 AND id = $2", [t, parked])
        }
        XCTAssertNil(try head(waiting), "a queue waiting for its token has no claimable head")
        _ = try h.update(t, target: waiting, state: ["eta": 2])
        XCTAssertEqual(try h.operation(t, parked).status, .queued, "the alert waiting for the token is not superseded")
        XCTAssertNil(try head(waiting), "an update behind an operation waiting for the token makes no head")
        let all = [empty, coalesced, behindAlert, inFlight, waiting]
        func heads() throws -> [String: String] {
            try h.db.system { c in
                Dictionary(
                    uniqueKeysWithValues: try c.query("SELECT target_id, operation_id AS h FROM dispatch_heads WHERE tenant_id = $1", [t])
                        .map { (try $0.string("target_id"), try $0.string("h")) })
            }
        }
        let written = try heads()
        try h.db.system { c in
            try c.execute("DELETE FROM dispatch_heads WHERE tenant_id = $1", [t])
            _ = try c.query("SELECT lr_dispatch_heads_refresh_set(array_fill($1::text, ARRAY[5]), $2::text[])", [t, PostgresTextArray(all)])
        }
        XCTAssertEqual(written, try heads(), "the writers' heads are those a full recomputation gives")
        XCTAssertEqual(Set(written.keys), [empty, coalesced, behindAlert], "heads for exactly the three targets with claimable work")
    }
    /// Migration 0040: a target whose queued update is superseded keeps its place among its
    /// tenant's due targets. Before it, the newer operation's `next_attempt_at` became the
    /// head's due time, so a target updated more often than the claims reached it went to the
    /// back every time and waited out the whole backlog.
    func testASupersededHeadKeepsItsPlaceInTheTenantsQueue() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let hot = try h.target(t, installation: inst, token: ProviderHarness.hexToken())
        try h.update(t, target: hot, state: ["eta": 1])
        let backlog = try (0..<5).map { _ in try h.target(t, installation: inst, token: ProviderHarness.hexToken()) }
        for b in backlog { try h.update(t, target: b, state: ["eta": 1]) }
        let newest = try h.update(t, target: hot, state: ["eta": 2])  // supersedes the hot target's first update
        let claimed = try h.db.system { c in try DispatchStore.claim(c, worker: "w", limit: 1, leaseSeconds: 30, now: Date()).map(\.id) }
        XCTAssertEqual(claimed, [newest], "the hot target was due first and still is")
    }
    /// Migration 0040: with `liverelay.head_by_writer` naming an operation, the head triggers
    /// leave its insert and a supersede by it to the writer (the head still names the
    /// superseded operation until `refreshHead` runs), and `refreshHead` then moves it.
    func testTheHeadTriggersLeaveTheWritersOperationToTheWriter() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: String(repeating: "cd", count: 32))
        let first = try h.update(t, target: tgt, state: ["eta": 1])
        let opId = Identifier.make(.operation)
        struct Rollback: Error {}
        XCTAssertThrowsError(
            try h.db.tenant(t) { c in
                let target = try XCTUnwrap(try TargetStore.get(c, tenantId: t, id: tgt, forUpdate: true))
                _ = try c.pipeline([
                    WritePath.headByWriter(operationId: opId),
                    OperationStore.insertStatement(
                        tenantId: t,
                        OperationStore.New(
                            id: opId, targetId: tgt, seq: target.opSeq + 1, kind: .update, revision: target.revision + 1, state: ["eta": 2],
                            alert: nil, options: WriteOptions(), consumesQuota: false, quotaDay: nil, createdByKeyId: nil, idempotencyKey: opId)),
                    WritePath.supersede(tenantId: t, targetId: tgt, ids: [first], by: opId)
                ]).get()
                let during = try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, tgt])
                XCTAssertEqual(try during.first?.string("operation_id"), first, "the triggers left the head to the writer")
                _ = try c.pipeline([WritePath.refreshHead(tenantId: t, targetId: tgt)]).get()
                let after = try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, tgt])
                XCTAssertEqual(try after.first?.string("operation_id"), opId, "the writer's refresh moved it")
                throw Rollback()
            })
        XCTAssertEqual(try h.operation(t, first).status, .queued, "rolled back")
    }
}
