import Crypto
import Foundation
import Locking
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// The write path's budgets and the quota counters (docs/write-path.md): round trips per write
/// counted on the connection, the quota exact at its boundary (also under concurrency) and the
/// trigger-kept counters equal to what the operations say.
final class WritePathTests: XCTestCase {
    var env: TestEnvironment!
    override func setUpWithError() throws { env = try TestEnvironment.make() }
    override func tearDown() {
        PostgresInstrumentation.setObserver(nil)
        env?.tearDown()
    }

    /// Round trips of the transactions labelled `label` that `body` ran (the write's own).
    func roundTrips(_ label: String, _ body: () -> Void) -> [Int] {
        reports(label, body).map(\.roundTrips)
    }

    /// Records the tenant's true quota reading of today as just taken (`QuotaHints`), so the
    /// next write of the test finds a recent reading whatever the machine's speed.
    func freshReading(_ tenant: String) throws {
        let day = QuotaStore.day(Date())
        let q = try env.db.system { c in try WritePath.quota(c.pipeline([WritePath.readQuota(tenantId: tenant, day: day)]).get()[0]) }
        QuotaHints.shared.record(tenantId: tenant, day: day, q)
    }

    /// The committed transactions labelled `label` that `body` ran.
    func reports(_ label: String, _ body: () -> Void) -> [PostgresTransactionReport] {
        let seen = Locked<[PostgresTransactionReport]>([])
        PostgresInstrumentation.setObserver { r in
            if r.label == label && r.committed { seen.withLock { $0.append(r) } }
        }
        body()
        PostgresInstrumentation.setObserver(nil)
        return seen.withLock { $0 }
    }

    func testEveryWriteStaysWithinFourRoundTrips() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let warm = w.start()
        XCTAssertEqual(w.update(warm, ["eta": 1], revision: 1).status, 202)  // compiles and caches the schema

        var target = ""
        let start = roundTrips("start") { target = w.start() }
        let update = roundTrips("update") { XCTAssertEqual(w.update(target, ["eta": 2], revision: 1).status, 202) }
        let statefulEnd = roundTrips("end") {
            let r = env.call(
                "POST", "/v1/remote-updates/live-activities/end",
                ["target_id": .string(target), "state": ["eta": 0], "expected_revision": 2, "idempotency_key": "end-1"],
                as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
        }
        let statelessEnd = roundTrips("end") {
            let r = env.call(
                "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(warm), "idempotency_key": "end-2"],
                as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
        }
        for (name, counts) in [("start", start), ("update", update), ("stateful end", statefulEnd), ("stateless end", statelessEnd)] {
            XCTAssertEqual(counts.count, 1, "\(name): one committed write transaction")
            XCTAssertLessThanOrEqual(counts.first ?? 99, 4, "\(name): round trips inside the transaction")
        }
        // This update adds a unit (the start it queues behind is not superseded), so the fast
        // quota path re-reads the counters in round trip 2 and answers from them in round trip 3.
        XCTAssertEqual(update, [3], "update: reads, writes + quota re-read, stored response + COMMIT")
    }

    /// Each statement costs the server an executor start-up in whatever round trip it rides, so
    /// the update's statements are counted too: BEGIN and one set_config statement (the
    /// tenant's settings and the writer's), the target with its idempotency key's record, its
    /// queued operations and the quota counters; the flag that lets the next statement skip the
    /// triggers whose work it does (docs/write-path.md "The writer's statement skips the
    /// triggers"), one statement for the target's new state, the operation, the supersede of the
    /// queued update it replaces (the first queued operation), the stored response and the head
    /// refresh (docs/write-path.md "One statement for the writes", "The head in the same
    /// statement"), and COMMIT, all in round trip 2 (the response is built before it:
    /// docs/write-path.md "The response before round trip 2"). The quota read is left out when a
    /// recent reading of this process stands in for it.
    func testAnUpdateReplacingAQueuedUpdateSendsEightStatementsAndSevenWithARecentQuotaReading() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let target = w.start()
        XCTAssertEqual(w.update(target, ["eta": 1], revision: 1).status, 202)  // compiles and caches the schema
        // The start was delivered, so the queued update is first: superseding it moves the head.
        try env.db.system { c in
            _ = try c.execute("UPDATE operations SET status = 'accepted' WHERE target_id = $1 AND kind = 'start'", [target])
        }
        QuotaHints.shared.forget(tenantId: w.tenant.id)
        let update = reports("update") { XCTAssertEqual(w.update(target, ["eta": 2], revision: 2).status, 202) }
        XCTAssertEqual(update.map(\.statements), [8])
        XCTAssertEqual(update.map(\.roundTrips), [2])
        // A recent reading stands in for the next one's read (docs/write-path.md "The quota read
        // only near the limit"); it reserves no unit, so it re-reads nothing.
        try freshReading(w.tenant.id)
        let next = reports("update") { XCTAssertEqual(w.update(target, ["eta": 3], revision: 3).status, 202) }
        XCTAssertEqual(next.map(\.statements), [7])
        XCTAssertEqual(next.map(\.roundTrips), [2])
        // A start with the same reading: BEGIN and the settings (its head and quota writer among
        // them), the claim, the start target and the live-target cap; the flag that lets the next
        // statement skip the insert triggers (migration 0047), one statement for the target, the
        // operation, the head, the live-target count and the reserved unit (docs/write-path.md
        // "A start's writes in one statement"), the flag cleared, the quota re-read (a start
        // always adds a unit); the stored response and COMMIT.
        try freshReading(w.tenant.id)
        let start = reports("start") { _ = w.start() }
        XCTAssertEqual(start.map(\.statements), [11])
        XCTAssertEqual(start.map(\.roundTrips), [3])
        // The writer's settings were in force for the write: the queued update it replaced is
        // superseded by it, the quota counters hold one unit per queued operation, and the head
        // names the first queued operation (what the writer keeps itself, migrations 0040/0041).
        let (rows, head, reserved) = try env.db.system { c in
            (
                try c.query("SELECT id, status, superseded_by FROM operations WHERE target_id = $1 AND kind = 'update' ORDER BY seq", [target]),
                try c.query(
                    "SELECT (SELECT operation_id FROM dispatch_heads WHERE target_id = $1) = (SELECT id FROM operations WHERE target_id = $1 AND status IN ('queued', 'sending') ORDER BY seq LIMIT 1) AS ok",
                    [target])[0].bool("ok"),
                try c.query("SELECT COALESCE(sum(reserved), 0)::int AS n FROM push_quota WHERE tenant_id = $1", [w.tenant.id])[0].int("n")
            )
        }
        XCTAssertEqual(try counters(w.tenant.id), try truth(w.tenant.id))
        XCTAssertEqual(try rows.map { try $0.string("status") }, ["superseded", "superseded", "queued"])
        XCTAssertEqual(try rows[0].optionalString("superseded_by"), try rows[1].string("id"))
        XCTAssertEqual(try rows[1].optionalString("superseded_by"), try rows[2].string("id"))
        XCTAssertTrue(head)
        XCTAssertEqual(reserved, 2, "the newest update and the second start (the first start's unit is used)")
    }

    /// docs/delivery.md "Claims at commit": with a dispatcher of this process lending a slot, an
    /// update and a stateful end claim their operation inside their own transaction, still within
    /// three round trips (the claim joins round trip 2), and hand it over only after COMMIT: the
    /// row is `sending` under the lent lease when the taker gets it. A write that is refused
    /// (409, rolled back) gives its slot back and hands nothing over.
    func testAClaimAtCommitJoinsTheWritesRoundTrips() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let target = w.start()
        XCTAssertEqual(w.update(target, ["eta": 1], revision: 1).status, 202)  // caches the schema; nothing lent yet
        let taker = StubCommitClaimTaker(db: env.db)
        env.db.commitClaims.register(taker)
        defer { env.db.commitClaims.withdraw(taker) }

        // The start is still queued (no dispatcher ran), so this update cannot become its
        // target's head (`WriteRules.keepsHead`): it borrows no slot and claims nothing, and
        // with nothing to read back it stores its answer and commits in round trip 2.
        let behind = roundTrips("update") { XCTAssertEqual(w.update(target, ["eta": 2], revision: 2).status, 202) }
        XCTAssertEqual(behind, [2])
        XCTAssertEqual(taker.reserved.withLock { $0 }, 0, "not the head: no slot borrowed")
        XCTAssertEqual(taker.taken.withLock { $0 }.count, 0, "not the head: nothing claimed")
        // As if the start had been delivered and the activity had registered its update token.
        try env.db.system { c in
            try c.execute("UPDATE operations SET status = 'cancelled' WHERE target_id = $1 AND status = 'queued'", [target])
            try c.execute(
                "UPDATE targets SET status = 'ready', push_token = $2, token_status = 'registered' WHERE id = $1",
                [target, String(repeating: "ab", count: 32)])
        }

        var opId = ""
        let update = roundTrips("update") {
            let r = w.update(target, ["eta": 3], revision: 3)
            XCTAssertEqual(r.status, 202)
            opId = r["operation"]?["id"]?.stringValue ?? ""
        }
        XCTAssertEqual(update, [3], "update with a claim at commit: reads, writes + claim, stored response + COMMIT")
        let taken = taker.taken.withLock { $0 }
        XCTAssertEqual(taken.count, 1)
        XCTAssertEqual(taken.last?.map(\.id), [opId], "the write's own operation, handed over after COMMIT")
        XCTAssertEqual(taken.last?.first?.attempts, 1)
        XCTAssertEqual(taker.statusesWhenTaken.withLock { $0 }.last, "sending stub-worker", "committed as sending under the lent lease")

        let refused = w.update(target, ["eta": 4], revision: 1)  // stale revision: 409, rolled back
        XCTAssertEqual(refused.status, 409)
        XCTAssertEqual(taker.reserved.withLock { $0 }, taker.taken.withLock { $0.count } + taker.released.withLock { $0 })
        XCTAssertEqual(taker.taken.withLock { $0.count }, 1, "a refused write hands nothing over")

        // A remote start claims its start operation the same way, within its four round trips.
        var started = ""
        let start = roundTrips("start") { started = w.start() }
        XCTAssertEqual(start.count, 1)
        XCTAssertLessThanOrEqual(start.first ?? 99, 4)
        let startTaken = taker.taken.withLock { $0.last } ?? []
        XCTAssertEqual(startTaken.map(\.targetId), [started])
        XCTAssertEqual(startTaken.first?.kind, .start)
        XCTAssertEqual(taker.statusesWhenTaken.withLock { $0.last }, "sending stub-worker")
    }

    /// Migration 0040: the API's start, update and end refresh their target's dispatch head
    /// themselves (`WritePath.refreshHead`), or leave it to their claim at commit. After each,
    /// the head is the one a full recomputation (`lr_dispatch_heads_refresh_set`) gives.
    func testTheAPIsWritesLeaveTheHeadAFullRecomputationGives() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.tenant.id
        func head(_ target: String) throws -> String? { try headOperation(t, target) }
        func recomputed(_ target: String) throws -> String? { try recomputedHead(t, target) }
        func op(_ r: TestEnvironment.Reply) -> String? { r["operation"]?["id"]?.stringValue }
        let target = w.start()
        let startOp = try env.db.system { c in
            try c.query("SELECT id FROM operations WHERE tenant_id = $1 AND target_id = $2 AND kind = 'start'", [t, target])[0].string("id")
        }
        XCTAssertEqual(try head(target), startOp, "a start's operation is its new target's head")
        XCTAssertEqual(try recomputed(target), startOp)
        let behindStart = w.update(target, ["eta": 1], revision: 1)
        XCTAssertEqual(behindStart.status, 202)
        XCTAssertEqual(try head(target), startOp, "an update behind the queued start leaves the start at the head")
        try startDelivered(target, token: "ab")  // as if the start had been delivered and the update token registered
        XCTAssertEqual(try head(target), op(behindStart))
        let newer = w.update(target, ["eta": 2], revision: 2)
        XCTAssertEqual(newer.status, 202)
        XCTAssertEqual(try head(target), op(newer), "the update that superseded the queued one is the head")
        XCTAssertEqual(try recomputed(target), op(newer))
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(target), "state": ["eta": 0], "expected_revision": 3, "idempotency_key": .string(UUID().uuidString)],
            as: w.sender.credential)
        XCTAssertEqual(end.status, 202, String(decoding: end.raw, as: UTF8.self))
        XCTAssertEqual(try head(target), op(end), "the end that superseded the update is the head")
        XCTAssertEqual(try recomputed(target), op(end))

        // With a claim at commit the claim settles the head: taken → no head; not taken → refreshed.
        let other = w.start()
        try startDelivered(other, token: "cd")
        let taker = StubCommitClaimTaker(db: env.db)
        env.db.commitClaims.register(taker)
        defer { env.db.commitClaims.withdraw(taker) }
        let claimed = w.update(other, ["eta": 1], revision: 1)
        XCTAssertEqual(claimed.status, 202)
        XCTAssertEqual(taker.taken.withLock { $0 }.last?.map(\.id), [op(claimed) ?? "?"], "claimed at commit")
        XCTAssertNil(try head(other), "an operation in flight: no head")
        let behind = w.update(other, ["eta": 2], revision: 2)
        XCTAssertEqual(behind.status, 202)
        XCTAssertEqual(taker.taken.withLock { $0 }.last?.count, 0, "behind the operation in flight: not claimed")
        XCTAssertNil(try head(other), "still no head while the first is in flight")
        XCTAssertNil(try recomputed(other))

        // The claim runs after the writes statement's flag is cleared (migration 0046): an
        // update that supersedes the queued head and is claimed at commit leaves no head, which
        // only the claim's own trigger removes (the writes statement skipped its triggers and
        // refreshes no head when a claim follows).
        let third = w.start()
        try startDelivered(third, token: "ef")
        env.db.commitClaims.withdraw(taker)
        let queuedHead = w.update(third, ["eta": 1], revision: 1)
        XCTAssertEqual(queuedHead.status, 202)
        XCTAssertEqual(try head(third), op(queuedHead), "no slot lent: queued, and the head")
        env.db.commitClaims.register(taker)
        let superseding = w.update(third, ["eta": 2], revision: 2)
        XCTAssertEqual(superseding.status, 202)
        XCTAssertEqual(taker.taken.withLock { $0 }.last?.map(\.id), [op(superseding) ?? "?"], "claimed at commit")
        XCTAssertNil(try head(third), "the claim's trigger removed the superseded head")
        XCTAssertNil(try recomputed(third))
    }

    /// Migration 0046 for an end: a stateless end of a target already `ending` leaves its status
    /// as it was, so its writes statement skips the triggers (one more statement for the flag);
    /// the state-bearing end before it moved the target to `ending` and ran them. After both,
    /// the head is what a recomputation gives and the quota counters are what the operations
    /// say.
    func testAnEndOfAnEndingTargetSkipsTheTriggersAndKeepsHeadAndCounters() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let t = w.tenant.id
        let target = w.start()
        try startDelivered(target, token: "ab")  // as if the start had been delivered and the update token registered
        func end(_ body: [String: JSONValue]) -> TestEnvironment.Reply {
            var b = body
            b["target_id"] = .string(target)
            b["idempotency_key"] = .string(UUID().uuidString)
            return env.call("POST", "/v1/remote-updates/live-activities/end", .object(b), as: w.sender.credential)
        }
        func headAndRecomputed() throws -> (String?, String?) { (try headOperation(t, target), try recomputedHead(t, target)) }
        try freshReading(t)
        var stateful: TestEnvironment.Reply!
        _ = reports("end") { stateful = end(["state": ["eta": 0], "expected_revision": 1]) }
        XCTAssertEqual(stateful.status, 202, stateful.text)
        XCTAssertEqual(stateful["target"]?["status"]?.stringValue, "ending")
        var (head, recomputed) = try headAndRecomputed()
        XCTAssertEqual(head, stateful["operation"]?["id"]?.stringValue)
        XCTAssertEqual(head, recomputed)
        try freshReading(t)
        var stateless: TestEnvironment.Reply!
        let second = reports("end") { stateless = end([:]) }
        XCTAssertEqual(stateless.status, 202, stateless.text)
        (head, recomputed) = try headAndRecomputed()
        XCTAssertEqual(head, stateless["operation"]?["id"]?.stringValue, "the stateless end superseded the queued end")
        XCTAssertEqual(head, recomputed)
        XCTAssertEqual(try counters(t), try truth(t))
        // BEGIN and the settings, the target with its key's record, its queued operations; the
        // flag, one statement for the target, the end, the supersede and the released unit, the
        // flag cleared, the stored answer (on its own beside a quota change); COMMIT.
        XCTAssertEqual(second.map(\.statements), [9])
        XCTAssertEqual(second.map(\.roundTrips), [2])
    }

    func testTheExactQuotaPathStaysWithinFourRoundTrips() throws {
        let w = try LifecycleWorld.make(env, quota: 10)  // below the fast path's margin: counters are locked
        let t = w.start()
        XCTAssertEqual(w.update(t, ["eta": 1], revision: 1).status, 202)  // caches the template's (absent) schema
        let update = roundTrips("update") { XCTAssertEqual(w.update(t, ["eta": 2], revision: 2).status, 202) }
        XCTAssertEqual(update.count, 1)
        XCTAssertLessThanOrEqual(update.first ?? 99, 4)
    }

    func testQuotaBoundaryNthWriteAcceptedNextRefused() throws {
        let n: Int64 = 4
        let w = try LifecycleWorld.make(env, quota: n)
        let t = w.start()  // 1
        for rev in 1...Int(n - 1) {  // 2…N (each supersedes nothing: alerts keep them)
            XCTAssertEqual(
                w.update(
                    t, ["eta": .int(Int64(rev))], revision: Int64(rev),
                    extra: ["alert": ["title": "t", "body": "b"]]
                ).status, 202, "write \(rev + 1) of \(n)")
        }
        let over = w.update(t, ["eta": 99], revision: n, extra: ["alert": ["title": "t", "body": "b"]])
        XCTAssertEqual(over.status, 429, over.text)
        XCTAssertEqual(over.errorCode, "QUOTA_EXCEEDED")
        XCTAssertEqual(try counters(w.tenant.id), try truth(w.tenant.id))
    }

    /// Concurrent starts against a quota above the fast path's margin: exactly `quota` are
    /// `quota.exhausted` at its boundary (docs/write-path.md "Quota kept by the writer"): with
    /// one unit left, an update that replaces a queued update of the same day takes none and
    /// records nothing; the next write that reserves takes the last unit and records it once.
    func testQuotaExhaustedIsRecordedByTheWriteThatTakesTheLastUnit() throws {
        let w = try LifecycleWorld.make(env, quota: 3)  // below the fast path's margin: the exact path decides
        func exhausted() throws -> Int {
            try env.db.system { c in
                try c.query("SELECT count(*) AS n FROM events WHERE tenant_id = $1 AND type = 'quota.exhausted'", [w.tenant.id])[0].int("n")
            }
        }
        let t = w.start()  // unit 1
        XCTAssertEqual(w.update(t, ["eta": 1], revision: 1).status, 202)  // unit 2
        XCTAssertEqual(w.update(t, ["eta": 2], revision: 2).status, 202, "replaces the queued update: still one unit left")
        XCTAssertEqual(try exhausted(), 0, "a write that reserves nothing does not use the quota up")
        _ = w.start()  // unit 3
        XCTAssertEqual(try exhausted(), 1, "the write that takes the last unit records it")
        let over = w.update(t, ["eta": 3], revision: 3)
        XCTAssertEqual(over.status, 429, over.text)
        XCTAssertEqual(over.errorCode, "QUOTA_EXCEEDED")
        XCTAssertEqual(try counters(w.tenant.id), try truth(w.tenant.id))
    }
    /// docs/write-path.md "A head the write cannot change": behind a queued start the head keeps
    /// naming the start and the update's statement has no head parts; with no queued operation,
    /// or when the update supersedes the first queued one, its statement refreshes the head
    /// (docs/write-path.md "The head in the same statement"), which then names the new update.
    /// The head equals a recomputation after every write.
    func testAnUpdateRefreshesTheHeadExactlyWhenItCanChange() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let target = w.start()
        XCTAssertEqual(w.update(target, ["eta": 1], revision: 1).status, 202)  // caches the schema and a quota reading
        func head() throws -> (name: String?, expected: String?, dueKept: Bool) {
            try env.db.system { c in
                let row = try c.query(
                    """
                    SELECT (SELECT operation_id FROM dispatch_heads WHERE target_id = $1) AS name,
                           (SELECT id FROM operations WHERE target_id = $1 AND status IN ('queued', 'sending') ORDER BY seq LIMIT 1) AS expected,
                           (SELECT d.due_at = o.next_attempt_at FROM dispatch_heads d JOIN operations o ON o.tenant_id = d.tenant_id AND o.id = d.operation_id
                             WHERE d.target_id = $1) AS due_kept
                    """, [target])[0]
                return (try row.optionalString("name"), try row.optionalString("expected"), try row.optionalBool("due_kept") ?? false)
            }
        }
        let startOp = try head().expected
        try freshReading(w.tenant.id)
        let behindStart = reports("update") { XCTAssertEqual(w.update(target, ["eta": 2], revision: 2).status, 202) }
        XCTAssertEqual(behindStart.map(\.statements), [7], "no quota read, no head refresh; the flag before the writes")
        var h = try head()
        XCTAssertEqual(h.name, startOp)
        XCTAssertEqual(h.name, h.expected)
        XCTAssertTrue(h.dueKept)
        // The start was delivered: the queued update is now first, and the next update supersedes it.
        try env.db.system { c in
            _ = try c.execute("UPDATE operations SET status = 'accepted' WHERE id = $1", [startOp])
        }
        h = try head()
        XCTAssertEqual(h.name, h.expected, "the delivery's own refresh")
        try freshReading(w.tenant.id)
        let superseding = reports("update") { XCTAssertEqual(w.update(target, ["eta": 3], revision: 3).status, 202) }
        XCTAssertEqual(superseding.map(\.statements), [7], "the head refresh rides in the writes' statement")
        h = try head()
        XCTAssertNotNil(h.name)
        XCTAssertEqual(h.name, h.expected, "names the new update")
        XCTAssertNotEqual(h.name, startOp)
        // Nothing queued: the update becomes the head.
        try env.db.system { c in
            _ = try c.execute("UPDATE operations SET status = 'accepted' WHERE target_id = $1 AND status = 'queued'", [target])
        }
        XCTAssertNil(try head().name)
        try freshReading(w.tenant.id)
        let alone = reports("update") { XCTAssertEqual(w.update(target, ["eta": 4], revision: 4).status, 202) }
        XCTAssertEqual(
            alone.map(\.statements), [10], "no supersede, but its new unit: the flag cleared after the writes, the re-read, then the stored answer")
        h = try head()
        XCTAssertNotNil(h.name)
        XCTAssertEqual(h.name, h.expected)
    }

    /// An end behind a queued start keeps the head too (it supersedes the queued update, not the
    /// start): no head refresh, and the head still names the start.
    func testAnEndBehindAQueuedStartKeepsTheHead() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let target = w.start()
        XCTAssertEqual(w.update(target, ["eta": 1], revision: 1).status, 202)
        try freshReading(w.tenant.id)
        let end = reports("end") {
            let r = env.call(
                "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(target), "idempotency_key": "end-behind"],
                as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
        }
        // BEGIN and the settings, the target with its key's record, its queued operations; one
        // statement for the target's status, the end, the supersede of the update and the
        // release of its unit (the end changes its target's status: no flag to skip the
        // triggers); the stored response (on its own beside a quota change); COMMIT. No head
        // refresh.
        XCTAssertEqual(end.map(\.statements), [7])
        let (name, expected) = try env.db.system { c -> (String?, String?) in
            let row = try c.query(
                """
                SELECT (SELECT operation_id FROM dispatch_heads WHERE target_id = $1) AS name,
                       (SELECT id FROM operations WHERE target_id = $1 AND status IN ('queued', 'sending') ORDER BY seq LIMIT 1) AS expected,
                       (SELECT id FROM operations WHERE target_id = $1 AND kind = 'start') AS start
                """, [target])[0]
            XCTAssertEqual(try row.optionalString("expected"), try row.optionalString("start"))
            return (try row.optionalString("name"), try row.optionalString("expected"))
        }
        XCTAssertNotNil(name)
        XCTAssertEqual(name, expected)
        XCTAssertEqual(try counters(w.tenant.id), try truth(w.tenant.id))
    }

    /// docs/write-path.md "The head in the same statement": the head the write's statement
    /// computes from its snapshot equals a recomputation after the commit when the first live
    /// operation is one the write does not touch: one in flight (no head row: it is not
    /// claimable), then a queued one parked for a token (no head row either), then, once that
    /// one is delivered, none (the new update is the head, due at its insert's time).
    func testTheHeadInTheWritesStatementMatchesARecomputationBehindWorkItDoesNotTouch() throws {
        let w = try LifecycleWorld.make(env, schema: ["type": "object", "properties": ["eta": ["type": "integer"]]])
        let target = w.start()
        func state() throws -> (name: String?, due: Date?, recomputed: String?, recomputedDue: Date?) {
            try env.db.system { c in
                let row = try c.query("SELECT operation_id, due_at FROM dispatch_heads WHERE target_id = $1", [target]).first
                let name = try row?.string("operation_id"), due = try row?.date("due_at")
                let t = w.tenant.id
                try c.execute("DELETE FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, target])
                _ = try c.query("SELECT lr_dispatch_heads_refresh_set(ARRAY[$1::text], ARRAY[$2::text])", [t, target])
                let again = try c.query("SELECT operation_id, due_at FROM dispatch_heads WHERE target_id = $1", [target]).first
                return (name, due, try again?.string("operation_id"), try again?.date("due_at"))
            }
        }
        // The start is in flight: an update queued behind it leaves no head.
        try env.db.system { c in
            _ = try c.execute(
                "UPDATE operations SET status = 'sending', lease_owner = 'test', lease_expires_at = now() + interval '1 minute' WHERE target_id = $1",
                [target])
        }
        XCTAssertEqual(w.update(target, ["eta": 1], revision: 1).status, 202)
        var s = try state()
        XCTAssertNil(s.name, "behind an operation in flight")
        XCTAssertNil(s.recomputed)
        // Delivered, and the queued update parked for a token: an update that supersedes it
        // (the first queued operation) inserts a parked-free operation, which is the head.
        try env.db.system { c in
            _ = try c.execute(
                "UPDATE operations SET status = 'accepted', lease_owner = NULL, lease_expires_at = NULL WHERE target_id = $1 AND kind = 'start'",
                [target])
            _ = try c.execute("UPDATE operations SET pending_reason = 'token_pending' WHERE target_id = $1 AND status = 'queued'", [target])
            _ = try c.execute("DELETE FROM dispatch_heads WHERE target_id = $1", [target])
        }
        XCTAssertEqual(w.update(target, ["eta": 2], revision: 2).status, 202)
        s = try state()
        XCTAssertNotNil(s.name, "the new update replaced the parked one at the head")
        XCTAssertEqual(s.name, s.recomputed)
        XCTAssertEqual(s.due, s.recomputedDue)
        // An alert update is kept (not superseded) and parked: the next update queues behind it,
        // which keeps the head (none: the first queued operation waits for a token).
        XCTAssertEqual(w.update(target, ["eta": 3], revision: 3, extra: ["alert": ["title": "t", "body": "b"]]).status, 202)
        try env.db.system { c in
            _ = try c.execute("UPDATE operations SET pending_reason = 'token_pending' WHERE target_id = $1 AND status = 'queued'", [target])
            _ = try c.execute("DELETE FROM dispatch_heads WHERE target_id = $1", [target])
        }
        XCTAssertEqual(w.update(target, ["eta": 4], revision: 4).status, 202)
        s = try state()
        XCTAssertNil(s.name, "the first queued operation waits for a token")
        XCTAssertNil(s.recomputed)
    }

    /// A recent reading only chooses the fast path; the re-read after reserving keeps the limit.
    /// With a reading that claims the day is empty while its counters say one unit is left, the
    /// write that takes the last unit is accepted and records `quota.exhausted`, and the next
    /// writes (an update adding a unit, a start) get 429, however wrong the reading.
    func testAWrongQuotaReadingCostsARetryNeverAnOvershoot() throws {
        let quota: Int64 = 1000
        let w = try LifecycleWorld.make(env, quota: quota)
        let day = QuotaStore.day(Date())
        let t = w.start()  // unit 1 (its operation stays queued)
        let other = w.start()  // unit 2
        // 997 more units of the day, as if reserved by other sessions.
        _ = try env.db.system { c in
            try c.execute(
                "INSERT INTO push_quota (tenant_id, day, shard, reserved, used) VALUES ($1, $2::date, 63, 0, 997) ON CONFLICT (tenant_id, day, shard) DO UPDATE SET used = push_quota.used + 997",
                [w.tenant.id, day])
        }
        let empty: QuotaHints.Reading = (limit: quota, reserved: 0, used: 0)
        QuotaHints.shared.record(tenantId: w.tenant.id, day: day, empty)
        XCTAssertNotNil(QuotaHints.shared.far(tenantId: w.tenant.id, day: day), "the wrong reading is in force")
        let attempts = Locked<[Bool]>([])
        PostgresInstrumentation.setObserver { r in if r.label == "update" { attempts.withLock { $0.append(r.committed) } } }
        XCTAssertEqual(w.update(t, ["eta": 1], revision: 1).status, 202, "unit 1000, taken on the exact path after the re-read")
        PostgresInstrumentation.setObserver(nil)
        XCTAssertEqual(attempts.withLock { $0 }, [false, true], "the fast path's re-read refused, the retry on the exact path took the unit")
        let events = try env.db.system { c in
            try c.query("SELECT count(*) AS n FROM events WHERE tenant_id = $1 AND type = 'quota.exhausted'", [w.tenant.id])[0].int("n")
        }
        XCTAssertEqual(events, 1)
        QuotaHints.shared.record(tenantId: w.tenant.id, day: day, empty)
        let over = w.update(other, ["eta": 1], revision: 1)
        XCTAssertEqual(over.status, 429, over.text)
        XCTAssertEqual(over.errorCode, "QUOTA_EXCEEDED")
        QuotaHints.shared.record(tenantId: w.tenant.id, day: day, empty)
        let start = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(start.status, 429, start.text)
        let reserved = try env.db.system { c in
            try c.query("SELECT (sum(reserved) + sum(used))::int AS n FROM push_quota WHERE tenant_id = $1 AND day = $2::date", [w.tenant.id, day])[0]
                .int("n")
        }
        XCTAssertEqual(reserved, Int(quota), "exactly the limit, not one more")
        XCTAssertEqual(try counters(w.tenant.id).reserved, try truth(w.tenant.id).reserved, "the counters of the writes, retried one included")
    }

    /// Concurrent starts against a quota above the fast path's margin: exactly `quota` are
    /// accepted, whatever the interleaving, and the counters match the operations.
    func testConcurrentStartsNeverOvershootTheQuota() throws {
        let quota = 90
        let w = try LifecycleWorld.make(env, quota: Int64(quota))
        let statuses = Locked<[Int]>([])
        let env = self.env!
        DispatchQueue.concurrentPerform(iterations: 12) { _ in
            for _ in 0..<10 {
                let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
                statuses.withLock { $0.append(r.status) }
            }
        }
        let all = statuses.withLock { $0 }
        XCTAssertEqual(all.filter { $0 == 202 }.count, quota, "accepted starts")
        XCTAssertEqual(all.filter { $0 == 429 }.count, 120 - quota, "refused starts: \(all.filter { $0 != 202 && $0 != 429 })")
        XCTAssertEqual(try counters(w.tenant.id), try truth(w.tenant.id))
        XCTAssertEqual(try counters(w.tenant.id).reserved, Int64(quota))
    }

    /// Concurrent updates with supersedes, then dispatcher-like bulk status changes and a
    /// deletion: the trigger-kept counters equal the counts of the operations at every step.
    func testCountersStayExactThroughConcurrentWritesAndStatusChanges() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let targets = (0..<6).map { _ in w.start() }
        let env = self.env!
        DispatchQueue.concurrentPerform(iterations: targets.count) { i in
            for rev in 1...8 {
                let extra: [String: JSONValue] = rev % 3 == 0 ? ["alert": ["title": "t", "body": "b"]] : [:]
                XCTAssertEqual(w.update(targets[i], ["eta": .int(Int64(rev))], revision: Int64(rev), extra: extra).status, 202)
            }
        }
        let tenant = w.tenant.id
        XCTAssertEqual(try counters(tenant), try truth(tenant), "after concurrent writes and supersedes")
        XCTAssertGreaterThan(try truth(tenant).reserved, 0)
        _ = try env.db.system { c in
            try c.execute("UPDATE operations SET status = 'sending' WHERE tenant_id = $1 AND status = 'queued' AND kind = 'start'", [tenant])
        }
        XCTAssertEqual(try counters(tenant), try truth(tenant), "queued → sending moves nothing")
        try env.db.system { c in
            try c.execute(
                """
                UPDATE operations SET status = CASE WHEN seq % 2 = 0 THEN 'accepted' ELSE 'unknown' END
                 WHERE tenant_id = $1 AND status = 'sending'
                """, [tenant])
            try c.execute("UPDATE operations SET status = 'failed' WHERE tenant_id = $1 AND status = 'queued' AND alert IS NOT NULL", [tenant])
        }
        XCTAssertEqual(try counters(tenant), try truth(tenant), "accepted/unknown consume, failed releases")
        XCTAssertGreaterThan(try truth(tenant).used, 0)
        // Cancelling every queued operation of one target and ending another locally.
        let end = env.call("POST", "/v1/installations/\(w.installationId)/targets/\(targets[0])/ended", [:], as: w.installationCredential)
        XCTAssertTrue([200, 202].contains(end.status), end.text)
        XCTAssertEqual(try counters(tenant), try truth(tenant), "a local end cancels and releases")
    }

    /// The live-target counter behind `409 TARGET_LIMIT` (migration 0017) equals the rows at
    /// every step: concurrent remote starts, a local reservation, ends, failed creations, a
    /// status moved back to live, deletions of live and ended targets, and bulk statements.
    func testLiveTargetCounterStaysExact() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let tenant = w.tenant.id
        func counted() throws -> Int { try env.db.tenant(tenant) { c in try TenantCapStore.liveTargets(c, tenantId: tenant) } }
        func rows() throws -> Int {
            try env.db.system { c in
                try c.query(
                    "SELECT count(*) AS n FROM targets WHERE tenant_id = $1 AND status NOT IN ('ended', 'creation_failed')",
                    [tenant])[0].int("n")
            }
        }
        let started = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let t = w.start()
            started.withLock { $0.append(t) }
        }
        let ids = started.withLock { $0 }
        XCTAssertEqual(try counted(), 8)
        XCTAssertEqual(try counted(), try rows(), "after concurrent starts")
        let local = env.call(
            "POST", "/v1/installations/\(w.installationId)/targets",
            [
                "activity_type": "delivery", "business_key": "local:1", "business_generation": "1",
                "idempotency_key": .string(UUID().uuidString), "state": ["eta": 1]
            ], as: w.installationCredential)
        XCTAssertEqual(local.status, 201, local.text)
        XCTAssertEqual(try counted(), 9)
        XCTAssertEqual(try counted(), try rows(), "after a local reservation")
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(ids[0]), "idempotency_key": "end-1"],
            as: w.sender.credential)
        XCTAssertEqual(end.status, 202, end.text)
        XCTAssertEqual(try counted(), try rows(), "ending is still live")
        try env.db.system { c in
            try c.execute(
                "UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = now() WHERE tenant_id = $1 AND id = ANY($2::text[])",
                [tenant, PostgresTextArray(Array(ids[0..<3]))])
            try c.execute("UPDATE targets SET status = 'creation_failed', ended_at = now() WHERE tenant_id = $1 AND id = $2", [tenant, ids[3]])
            // A terminal status changed to the other terminal status, and one made live again: only leaving or entering counts.
            try c.execute("UPDATE targets SET status = 'ended' WHERE tenant_id = $1 AND id = $2", [tenant, ids[3]])
            try c.execute("UPDATE targets SET status = 'ready' WHERE tenant_id = $1 AND id = $2", [tenant, ids[2]])
        }
        XCTAssertEqual(try counted(), 9 - 3)
        XCTAssertEqual(try counted(), try rows(), "after bulk ends, a failed creation and a revived target")
        try env.db.system { c in
            try c.execute(
                "DELETE FROM operations WHERE tenant_id = $1 AND target_id = ANY($2::text[])", [tenant, PostgresTextArray([ids[0], ids[4]])])
            try c.execute("DELETE FROM targets WHERE tenant_id = $1 AND id = ANY($2::text[])", [tenant, PostgresTextArray([ids[0], ids[4]])])
        }
        XCTAssertEqual(try counted(), 9 - 4)
        XCTAssertEqual(try counted(), try rows(), "deleting an ended target changes nothing, a live one counts down")
        let other = try env.tenant(name: "Other")
        XCTAssertEqual(try env.db.tenant(other.id) { c in try TenantCapStore.liveTargets(c, tenantId: other.id) }, 0, "per tenant")

        // One statement over many targets (a channel's broadcast members ending together, a
        // retention purge): counted once per statement (migration 0019). Per-row upserts of one
        // counter row grew as n^2 and ran into the 30 s statement_timeout well below this size.
        let bulk = 40_000
        _ = try env.db.system { c in
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status, op_seq)
                SELECT $1, 'tgt_bulk' || lpad(g::text, 8, '0'), $2, 'local', 'delivery', 'tv_test', 'ready', 1, '{}'::jsonb,
                       lpad(to_hex(g), 64, '0'), 'registered', 0
                  FROM generate_series(1, $3) g
                """, [tenant, w.installationId, bulk])
        }
        XCTAssertEqual(try counted(), 9 - 4 + bulk)
        XCTAssertEqual(try counted(), try rows(), "after one insert of \(bulk) targets")
        _ = try env.db.system { c in
            try c.execute(
                "UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = now() WHERE tenant_id = $1 AND id LIKE 'tgt_bulk%' AND id <= $2",
                [tenant, "tgt_bulk" + String(format: "%08d", bulk / 2)])
        }
        XCTAssertEqual(try counted(), 9 - 4 + bulk / 2)
        XCTAssertEqual(try counted(), try rows(), "after one statement ended \(bulk / 2) of them")
        // The target events of those statements (migration 0019, once per statement): one
        // target.ready per inserted target, one target.ended per ended one, nothing for the rest.
        let events = try env.db.system { c in
            try c.query(
                "SELECT type, count(*) AS n FROM events WHERE tenant_id = $1 AND target_id LIKE 'tgt_bulk%' GROUP BY type ORDER BY type", [tenant]
            ).map { "\(try $0.string("type"))=\(try $0.int("n"))" }
        }
        XCTAssertEqual(events, ["target.ended=\(bulk / 2)", "target.ready=\(bulk)"])
        _ = try env.db.system { c in try c.execute("DELETE FROM targets WHERE tenant_id = $1 AND id LIKE 'tgt_bulk%'", [tenant]) }
        XCTAssertEqual(try counted(), 9 - 4)
        XCTAssertEqual(try counted(), try rows(), "after one statement deleted them all")
    }

    /// Post-commit hints are queued for the notifier thread (many callers at once, duplicates
    /// among them); every distinct hint arrives.
    func testQueuedNotificationsAllArrive() throws {
        let listener = try PostgresConnection(env.conninfo)
        defer { listener.close() }
        try listener.listen("lr_test_hints")
        let db = env.db
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            db.sendNotifications([("lr_test_hints", "same"), ("lr_test_hints", "p\(i)")])
        }
        env.db.flushNotifications()
        var got: [String] = []
        let deadline = Date(timeIntervalSinceNow: 5)
        while Set(got).count < 9 && Date() < deadline {
            got += try listener.waitForNotifications(timeoutSeconds: 0.5).map(\.payload)
        }
        XCTAssertEqual(Set(got), Set(["same"] + (0..<8).map { "p\($0)" }))
    }

    /// docs/write-path.md "What a write returns": an update and an end return only the columns
    /// they change and take the rest of the target from the row they locked; the `target` of
    /// each response equals the target a read returns right after, field by field.
    func testAWritesTargetEqualsTheTargetReadAfterIt() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        func read(_ target: String) -> JSONValue? {
            env.call("GET", "/v1/remote-updates/live-activities/targets/\(target)", as: w.sender.credential).json
        }
        let target = w.start()
        let update = w.update(target, ["eta": 7], revision: 1, extra: ["stale_at": "2031-01-01T00:00:00Z", "relevance_score": 0.5])
        XCTAssertEqual(update.status, 202, update.text)
        XCTAssertEqual(update["target"]?["revision"], 2)
        XCTAssertEqual(update["target"], read(target), "after an update")
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(target), "state": ["eta": 0], "expected_revision": 2, "idempotency_key": .string(UUID().uuidString)],
            as: w.sender.credential)
        XCTAssertEqual(end.status, 202, end.text)
        XCTAssertEqual(end["target"]?["status"], "ending")
        XCTAssertEqual(end["target"], read(target), "after a state-bearing end")
        let other = w.start()
        let cleanup = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(other), "idempotency_key": .string(UUID().uuidString)],
            as: w.sender.credential)
        XCTAssertEqual(cleanup.status, 202, cleanup.text)
        XCTAssertEqual(cleanup["target"]?["status"], "ending")
        XCTAssertEqual(cleanup["target"], read(other), "after a stateless end")
    }

    /// docs/write-path.md "The locking read joins its rows" and "A start reads its target's
    /// budget in round trip 1": the priority-10 budget in a write's answer comes from the
    /// tenant's and the installation's rows joined to the locked target (for a start, to its
    /// start target), and equals what a read shows: the tenant's own budget, then, once the
    /// installation reports frequent updates, the tenant's other one.
    func testAWritesBudgetIsItsTenantsForItsInstallationAsAReadShows() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        func read(_ target: String) -> JSONValue? {
            env.call("GET", "/v1/remote-updates/live-activities/targets/\(target)", as: w.sender.credential).json
        }
        try env.db.system { c in
            try c.execute(
                "UPDATE tenants SET priority10_hourly_budget = 12, frequent_updates_hourly_budget = 99 WHERE tenant_id = $1", [w.tenant.id])
        }
        let started = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(started.status, 202, started.text)
        let target = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        XCTAssertEqual(started["target"]?["priority10_budget"], 12, "the tenant's budget, not the default 40")
        XCTAssertEqual(started["target"]?["priority10_sent_last_hour"], 0)
        XCTAssertEqual(started["target"], read(target), "a start's target as stored")
        try env.db.system { c in
            try c.execute(
                "UPDATE installations SET frequent_updates = true WHERE id = (SELECT installation_id FROM targets WHERE id = $1)", [target])
        }
        let update = w.update(target, ["eta": 7], revision: 1)
        XCTAssertEqual(update.status, 202, update.text)
        XCTAssertEqual(update["target"]?["priority10_budget"], 99, "the frequent-updates budget of the tenant")
        XCTAssertEqual(update["target"], read(target), "an update's target as a read shows it")
    }

    /// docs/write-path.md "The response before round trip 2": an update or an end that answers
    /// from the rows as its statements will leave them (two round trips) answers what the rows
    /// hold, to the byte after a reload: times rounded to microseconds as stored (a stale date
    /// and an expiry with seven fraction digits), relevance scores with no exact binary value,
    /// priority 5 and an alert; the replay of its key is the same answer. The write that adds a
    /// unit re-reads the quota in round trip 2 and answers from the rows in round trip 3. Here
    /// the writes read their rows back and the handler compares them with the built answer
    /// (`WritePath.checksBuiltAnswers`, on in debug builds).
    func testAWriteAnsweredBeforeItsStatementsRanAnswersWhatTheRowsHold() throws {
        let before = WritePath.checksBuiltAnswers
        WritePath.checksBuiltAnswers = true
        defer { WritePath.checksBuiltAnswers = before }
        try answeredBeforeItsStatementsRan()
    }

    /// The same writes with the statements a release build sends (docs/write-path.md "Rows
    /// nobody reads"): nothing read back, the same answers, the same statements and round trips.
    func testAWriteThatReadsNoRowsBackAnswersWhatTheRowsHoldToo() throws {
        let before = WritePath.checksBuiltAnswers
        WritePath.checksBuiltAnswers = false
        defer { WritePath.checksBuiltAnswers = before }
        try answeredBeforeItsStatementsRan()
    }

    /// docs/write-path.md "A start's writes in one statement": a start's operation is not read
    /// back but built from what it inserted, so its answer must equal the rows as stored, to the
    /// byte on replay: times rounded to microseconds as stored (seven fraction digits), a
    /// relevance score with no exact binary value, priority 5 and an alert with non-ASCII text.
    /// Its head is what a full recomputation gives.
    func testAStartsAnswerIsWhatItsRowsHold() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        func read(_ path: String) -> JSONValue? { env.call("GET", path, as: w.sender.credential).json }
        let body = w.startBody(
            ["eta": 3],
            extra: [
                "stale_at": "2031-01-01T00:00:00.1234567Z", "expires_at": "2031-01-02T03:04:05.9999996Z", "relevance_score": 1e-7,
                "priority": 5, "alert": ["title": "Ünïcode \u{2028} title", "body": "line\nbreak"]
            ])
        do {
            let r = env.call("POST", "/v1/remote-updates/live-activities/start", body, as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
            let opId = r["operation"]?["id"]?.stringValue ?? "", target = r["target"]?["id"]?.stringValue ?? ""
            XCTAssertEqual(r["operation"], read("/v1/remote-updates/operations/\(opId)"), "the operation as stored")
            XCTAssertEqual(r["target"], read("/v1/remote-updates/live-activities/targets/\(target)"), "the target as stored")
            XCTAssertEqual(r["operation"]?["priority"], 5)
            let replay = env.call("POST", "/v1/remote-updates/live-activities/start", body, as: w.sender.credential)
            XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
            XCTAssertEqual(String(decoding: replay.raw, as: UTF8.self), String(decoding: r.raw, as: UTF8.self), "the replay, byte for byte")
            let heads = try? env.db.system { c -> [String?] in
                let name = try c.query("SELECT operation_id FROM dispatch_heads WHERE target_id = $1", [target]).first?.string("operation_id")
                try c.execute("DELETE FROM dispatch_heads WHERE target_id = $1", [target])
                _ = try c.query("SELECT lr_dispatch_heads_refresh_set(ARRAY[$1::text], ARRAY[$2::text])", [w.tenant.id, target])
                return [name, try c.query("SELECT operation_id FROM dispatch_heads WHERE target_id = $1", [target]).first?.string("operation_id")]
            }
            XCTAssertEqual(heads, [opId, opId], "the start is its target's head, as a recomputation says")
        }
    }

    func answeredBeforeItsStatementsRan() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        func read(_ path: String) -> JSONValue? { env.call("GET", path, as: w.sender.credential).json }
        func checkStored(_ r: TestEnvironment.Reply, _ target: String, _ what: String) {
            let opId = r["operation"]?["id"]?.stringValue ?? ""
            XCTAssertEqual(r["operation"], read("/v1/remote-updates/operations/\(opId)"), "\(what): the operation as stored")
            XCTAssertEqual(r["target"], read("/v1/remote-updates/live-activities/targets/\(target)"), "\(what): the target as stored")
        }
        XCTAssertEqual(w.update(w.start(), ["eta": 1], revision: 1).status, 202)  // loads and caches the schema
        let target = w.start()
        // Behind the queued start, the first update adds a unit: round trip 3 answers.
        let first = reports("update") {
            let r = w.update(target, ["eta": 6], revision: 1, extra: ["relevance_score": 1e-7])
            XCTAssertEqual(r.status, 202, r.text)
            checkStored(r, target, "an update that adds a unit")
        }
        XCTAssertEqual(first.map(\.roundTrips), [3])
        // The next update replaces it (adds no unit): answered before round trip 2.
        let key = UUID().uuidString
        let body: JSONValue = [
            "target_id": .string(target), "state": ["eta": 7], "expected_revision": 2, "idempotency_key": .string(key),
            "stale_at": "2031-01-01T00:00:00.1234567Z", "expires_at": "2031-01-02T03:04:05.9999996Z", "relevance_score": 0.1,
            "priority": 5, "alert": ["title": "Ünïcode \u{2028} title", "body": "line\nbreak"]
        ]
        var answer = ""
        let second = reports("update") {
            let r = env.call("POST", "/v1/remote-updates/live-activities/update", body, as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
            checkStored(r, target, "an update answered before its writes")
            XCTAssertEqual(r["operation"]?["priority"], 5)
            XCTAssertEqual(r["operation"]?["has_alert"], true)
            XCTAssertEqual(r["target"]?["relevance_score"], 0.1)
            answer = String(decoding: r.raw, as: UTF8.self)
        }
        XCTAssertEqual(second.map(\.roundTrips), [2])
        let replay = env.call("POST", "/v1/remote-updates/live-activities/update", body, as: w.sender.credential)
        XCTAssertEqual(replay.status, 202)
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(String(decoding: replay.raw, as: UTF8.self), answer, "the replay is the stored answer, byte for byte")
        // A stateless end supersedes that update and keeps the revision: also two round trips.
        let end = reports("end") {
            let r = env.call(
                "POST", "/v1/remote-updates/live-activities/end",
                ["target_id": .string(target), "idempotency_key": .string(UUID().uuidString), "expires_at": "2031-01-03T00:00:00.000001Z"],
                as: w.sender.credential)
            XCTAssertEqual(r.status, 202, r.text)
            XCTAssertEqual(r["target"]?["status"], "ending")
            checkStored(r, target, "a stateless end")
        }
        XCTAssertEqual(end.map(\.roundTrips), [2])
    }

    /// Sends `body` to the update endpoint while a transaction of the test that ran `hold` is
    /// open, and commits that transaction once the update waits for a lock in a statement whose
    /// text starts with `waitingIn`; returns the update's reply.
    func updateWhileHolding(
        _ hold: @escaping @Sendable (PostgresConnection) throws -> Void, body: JSONValue, credential: String, waitingIn: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> TestEnvironment.Reply {
        let held = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let env = self.env!, db = env.db
        Thread {
            try? db.system { c in
                try hold(c)
                held.signal()
                release.wait()
            }
            held.signal()  // never leaves the test waiting when `hold` failed
        }.start()
        held.wait()
        let answer = Locked<TestEnvironment.Reply?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let reply = env.call("POST", "/v1/remote-updates/live-activities/update", body, as: credential)
            answer.withLock { $0 = reply }
            done.signal()
        }.start()
        let admin = try PostgresConnection(env.database.adminConninfo)
        defer { admin.close() }
        var waiting = false
        for _ in 0..<200 where !waiting {
            waiting =
                try admin.query(
                    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND starts_with(query, $2)",
                    [env.database.name, waitingIn])[0].int("n") == 1
            if !waiting { Thread.sleep(forTimeInterval: 0.05) }
        }
        XCTAssertTrue(waiting, "the update waited for a lock in \(waitingIn) …", file: file, line: line)
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, file: file, line: line)
        return try XCTUnwrap(answer.withLock { $0 }, file: file, line: line)
    }

    /// docs/write-path.md "Idempotency": an update reads its key in round trip 1 and inserts the
    /// record with its answer before COMMIT. When another request with the same key stores its
    /// record after that read (here a transaction of the test, holding it uncommitted until the
    /// update waits on it), the update's insert fails on the unique index, the transaction runs
    /// again, and its read replays the other request's answer: no second operation, the target
    /// unchanged.
    func testAnUpdateWhoseKeyIsStoredMeanwhileRunsAgainAndReplaysTheStoredAnswer() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let target = w.start()
        let key = UUID().uuidString
        let body: JSONValue = ["target_id": .string(target), "state": ["eta": 9], "expected_revision": 1, "idempotency_key": .string(key)]
        let endpoint = "POST /v1/remote-updates/live-activities/update"
        let stored = #"{"stored":"by the other request"}"#
        let tenantId = w.tenant.id, hash = Digest.sha256Hex(body.serialized())
        // Committed once the update's insert waits on the uncommitted record.
        let r = try updateWhileHolding(
            { c in
                try c.execute(
                    """
                    INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, response_body, expires_at)
                    VALUES ($1, $2, $3, $4, 202, $5, now() + interval '1 hour')
                    """, [tenantId, endpoint, key, hash, Array(stored.utf8)])
            }, body: body, credential: w.sender.credential, waitingIn: "INSERT INTO idempotency_records")
        XCTAssertEqual(r.status, 202)
        XCTAssertEqual(r.headers["idempotent-replayed"], "true")
        XCTAssertEqual(String(decoding: r.raw, as: UTF8.self), stored, "the other request's answer, replayed")
        let (revision, updates) = try env.db.system { c in
            (
                try c.query("SELECT revision FROM targets WHERE id = $1", [target])[0].int64("revision"),
                try c.query("SELECT count(*)::int AS n FROM operations WHERE target_id = $1 AND kind = 'update'", [target])[0].int("n")
            )
        }
        XCTAssertEqual(revision, 1, "the update's own work was rolled back")
        XCTAssertEqual(updates, 0)
    }

    /// docs/write-path.md "Idempotency": the key is read in the statement that locks the target,
    /// which keeps the key's row as it read it before waiting for the lock. A repeat of a write
    /// that waited for the first one's lock would then be refused by the revision rule; rule 3
    /// comes first, so the key is read again before any refusal and the stored answer replayed.
    /// (The first write is played by a transaction of the test: it bumps the revision and
    /// stores the answer, and commits only once the repeat waits for the target's lock.)
    func testARepeatThatWaitedForTheTargetsLockReplaysInsteadOfARevisionConflict() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let target = w.start()
        let key = UUID().uuidString
        let body: JSONValue = ["target_id": .string(target), "state": ["eta": 9], "expected_revision": 1, "idempotency_key": .string(key)]
        let stored = #"{"stored":"by the first request"}"#
        let tenantId = w.tenant.id, hash = Digest.sha256Hex(body.serialized())
        // Committed once the repeat waits for the target's lock (in its target's statement, WritePath.lockTarget).
        let r = try updateWhileHolding(
            { c in
                try c.execute("UPDATE targets SET revision = 2 WHERE tenant_id = $1 AND id = $2", [tenantId, target])
                try c.execute(
                    """
                    INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, response_body, expires_at)
                    VALUES ($1, 'POST /v1/remote-updates/live-activities/update', $2, $3, 202, $4, now() + interval '1 hour')
                    """, [tenantId, key, hash, Array(stored.utf8)])
            }, body: body, credential: w.sender.credential, waitingIn: "SELECT t.tenant_id, t.id, t.installation_id")
        XCTAssertEqual(r.status, 202, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r.headers["idempotent-replayed"], "true")
        XCTAssertEqual(String(decoding: r.raw, as: UTF8.self), stored)
    }

    /// A key whose record is past its retention is taken over by the next request that uses it,
    /// whatever its earlier request was: the record is replaced with the new answer, which is
    /// replayed from then on.
    func testAnUpdateTakesOverAKeyPastItsRetention() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let target = w.start()
        let key = UUID().uuidString
        _ = try env.db.system { c in
            try c.execute(
                """
                INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, response_body, created_at, expires_at)
                VALUES ($1, 'POST /v1/remote-updates/live-activities/update', $2, 'another request', 202, '\\x7b7d'::bytea,
                        now() - interval '2 days', now() - interval '1 day')
                """, [w.tenant.id, key])
        }
        let body: JSONValue = ["target_id": .string(target), "state": ["eta": 9], "expected_revision": 1, "idempotency_key": .string(key)]
        let first = env.call("POST", "/v1/remote-updates/live-activities/update", body, as: w.sender.credential)
        XCTAssertEqual(first.status, 202, String(decoding: first.raw, as: UTF8.self))
        XCTAssertNil(first.headers["idempotent-replayed"])
        XCTAssertEqual(first["target"]?["revision"], 2)
        let replay = env.call("POST", "/v1/remote-updates/live-activities/update", body, as: w.sender.credential)
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay.raw, first.raw)
        let records = try env.db.system { c in
            try c.query("SELECT request_hash, expires_at > now() AS live FROM idempotency_records WHERE key = $1", [key])
        }
        XCTAssertEqual(records.count, 1)
        XCTAssertEqual(try records.first?.string("request_hash"), Digest.sha256Hex(body.serialized()))
        XCTAssertEqual(try records.first?.bool("live"), true)
    }

    /// Migration 0042: the value checks of `targets` and `operations` moved into domains and still
    /// refuse every value outside their lists (SQLSTATE 23514, check_violation), in an insert and
    /// in an update, while every listed value is taken.
    func testTheValueDomainsRefuseWhatTheChecksRefused() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let target = w.start()
        let refused: [(String, String)] = [
            ("targets", "status = 'done'"), ("targets", "end_reason = 'bored'"), ("targets", "origin = 'elsewhere'"),
            ("targets", "token_status = 'lost'"), ("targets", "delivery = 'carrier_pigeon'"),
            ("operations", "kind = 'restart'"), ("operations", "status = 'lost'"), ("operations", "priority = 7"),
            ("operations", "sent_priority = 2")
        ]
        for (table, set) in refused {
            let column = table == "targets" ? "id" : "target_id"
            XCTAssertThrowsError(
                try env.db.system { c in try c.execute("UPDATE \(table) SET \(set) WHERE \(column) = $1", [target]) }, "\(table): \(set)"
            ) { e in XCTAssertEqual((e as? PostgresError)?.sqlState, "23514", "\(table): \(set): \(e)") }
        }
        try env.db.system { c in
            for s in TargetStatus.allCases {
                try c.execute("UPDATE targets SET status = $2::text, ended_at = now() WHERE id = $1", [target, s.rawValue])
            }
            for s in OperationStatus.allCases { try c.execute("UPDATE operations SET status = $2::text WHERE target_id = $1", [target, s.rawValue]) }
            for p in [5, 10] { try c.execute("UPDATE operations SET priority = $2::int WHERE target_id = $1", [target, p]) }
            for p in [1, 5, 10] { try c.execute("UPDATE operations SET sent_priority = $2::smallint WHERE target_id = $1", [target, p]) }
        }
        let op = OperationStore.New(
            id: Identifier.make(.operation), targetId: target, seq: 99, kind: .update, revision: 1, state: ["eta": 1], alert: nil,
            options: WriteOptions(), consumesQuota: false, quotaDay: nil, createdByKeyId: nil, idempotencyKey: "domains")
        let good = OperationStore.insertStatement(tenantId: w.tenant.id, op)
        var params = good.params
        params[4] = "restart"  // kind
        let bad = PostgresStatement(good.sql, params)
        XCTAssertThrowsError(try env.db.system { c in _ = try c.pipeline([bad]).get() }) { e in
            XCTAssertEqual((e as? PostgresError)?.sqlState, "23514", "\(e)")
        }
    }

    /// docs/write-path.md "Quota kept by the writer" (migration 0041): the API's updates and
    /// ends add the net change of reserved units themselves, per day. A queued update of an
    /// earlier day that an update supersedes gives its unit back to that day, not to today, and
    /// the counters of every day equal what the operations say after each write.
    func testTheWritersKeepTheQuotaCountersOfEveryDayExact() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let t = w.tenant.id
        func op(_ r: TestEnvironment.Reply) -> String { r["operation"]?["id"]?.stringValue ?? "?" }
        let target = w.start()
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "after the start")
        let first = w.update(target, ["eta": 1], revision: 1)
        XCTAssertEqual(first.status, 202)
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "an update superseding nothing reserves one unit")
        let second = w.update(target, ["eta": 2], revision: 2)
        XCTAssertEqual(second.status, 202)
        let firstStatus = try env.db.system { c in try c.query("SELECT status FROM operations WHERE id = $1", [op(first)])[0].string("status") }
        XCTAssertEqual(firstStatus, "superseded")
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "an update replacing a queued update of its day: no change")
        // As if `second` had been queued yesterday (the quota trigger moves its unit there).
        _ = try env.db.system { c in try c.execute("UPDATE operations SET quota_day = quota_day - 1 WHERE id = $1", [op(second)]) }
        XCTAssertEqual(try countersByDay(t).count, 2, "fixture: a unit reserved yesterday")
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "fixture: a unit reserved yesterday")
        let third = w.update(target, ["eta": 3], revision: 3)
        XCTAssertEqual(third.status, 202)
        let days = try truthByDay(t)
        XCTAssertEqual(days.count, 1, "yesterday's unit was released: \(days)")
        XCTAssertEqual(try countersByDay(t), days, "superseding yesterday's update")
        let alert = w.update(target, ["eta": 4], revision: 4, extra: ["alert": ["title": "t", "body": "b"]])
        XCTAssertEqual(alert.status, 202)
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "an alert update")
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(target), "state": ["eta": 0], "expected_revision": 5, "idempotency_key": .string(UUID().uuidString)],
            as: w.sender.credential)
        XCTAssertEqual(end.status, 202, end.text)
        XCTAssertEqual(try countersByDay(t), try truthByDay(t), "a state-bearing end")
        let other = w.start()
        XCTAssertEqual(w.update(other, ["eta": 1], revision: 1).status, 202)
        let cleanup = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(other), "idempotency_key": .string(UUID().uuidString)],
            as: w.sender.credential)
        XCTAssertEqual(cleanup.status, 202, cleanup.text)
        XCTAssertEqual(
            try countersByDay(t), try truthByDay(t), "a stateless end releases what it supersedes")
        XCTAssertEqual(try counters(t), try truth(t))
    }

    /// Migration 0041's triggers leave to the writer exactly the rows of the operation named in
    /// `liverelay.quota_by_writer`: its insert and the rows it supersedes. Another insert, and
    /// another status change in the same statement as the writer's supersede, are counted.
    func testTheQuotaTriggersLeaveOnlyTheWritersRowsToTheWriter() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let t = w.tenant.id
        let target = w.start()
        func op(_ r: TestEnvironment.Reply) -> String { r["operation"]?["id"]?.stringValue ?? "?" }
        let a = op(w.update(target, ["eta": 1], revision: 1, extra: ["alert": ["title": "t", "body": "b"]]))
        let b = op(w.update(target, ["eta": 2], revision: 2, extra: ["alert": ["title": "t", "body": "b"]]))
        let writer = Identifier.make(.operation), bystander = Identifier.make(.operation)
        let day = QuotaStore.day(Date())
        struct Rollback: Error {}
        XCTAssertThrowsError(
            try env.db.tenant(t) { c in
                func reserved() throws -> Int64 { try reservedUnits(c, t) }
                let tr = try XCTUnwrap(try TargetStore.get(c, tenantId: t, id: target, forUpdate: true))
                func new(_ id: String, seq: Int64) -> OperationStore.New {
                    OperationStore.New(
                        id: id, targetId: target, seq: seq, kind: .update, revision: tr.revision + 1, state: ["eta": 9], alert: nil,
                        options: WriteOptions(), consumesQuota: true, quotaDay: day, createdByKeyId: nil, idempotencyKey: id)
                }
                let start = try reserved()
                _ = try c.pipeline([WritePath.headByWriter(operationId: writer, with: [WritePath.quotaByWriter(operationId: writer)])]).get()
                _ = try c.pipeline([OperationStore.insertStatement(tenantId: t, new(writer, seq: tr.opSeq + 1))]).get()
                XCTAssertEqual(try reserved(), start, "the writer's insert is left to the writer")
                _ = try c.pipeline([OperationStore.insertStatement(tenantId: t, new(bystander, seq: tr.opSeq + 2))]).get()
                XCTAssertEqual(try reserved(), start + 1, "another insert is counted")
                try c.execute(
                    """
                    UPDATE operations SET status = CASE WHEN id = $2 THEN 'superseded' ELSE 'cancelled' END,
                           superseded_by = CASE WHEN id = $2 THEN $4 END
                     WHERE tenant_id = $1 AND id IN ($2, $3)
                    """, [t, a, b, writer])
                XCTAssertEqual(try reserved(), start, "the writer's supersede of a is left to it, b's cancellation is counted")
                _ = try c.pipeline([WritePath.supersede(tenantId: t, targetId: target, ids: [bystander], by: "op_someone_else")]).get()
                XCTAssertEqual(try reserved(), start - 1, "a supersede by another operation is counted")
                throw Rollback()
            })
        XCTAssertEqual(try counters(t), try truth(t), "rolled back")
    }

    /// Migration 0046: `liverelay.writer_rows` makes the derived-state triggers skip their
    /// call, so it must live for the writer's one statement only. With it on, an insert that is
    /// NOT the writer's goes uncounted (which is why the flag never rides on a statement the
    /// writer did not build), and so does a target's status change; after `endOfWriterRows`
    /// every trigger counts again. A write that changes its target's status sets no flag.
    func testTheWriterRowsFlagSkipsTheTriggersUntilItIsCleared() throws {
        let w = try LifecycleWorld.make(env, quota: 100_000)
        let t = w.tenant.id
        let target = w.start()
        let day = QuotaStore.day(Date())
        struct Rollback: Error {}
        XCTAssertThrowsError(
            try env.db.tenant(t) { c in
                func reserved() throws -> Int64 { try reservedUnits(c, t) }
                func live() throws -> Int64 {
                    try c.query("SELECT COALESCE(sum(live), 0)::bigint AS n FROM live_target_counts WHERE tenant_id = $1", [t])[0].int64("n")
                }
                let tr = try XCTUnwrap(try TargetStore.get(c, tenantId: t, id: target, forUpdate: true))
                func insert(seq: Int64) throws {
                    let id = Identifier.make(.operation)
                    _ = try c.pipeline([
                        OperationStore.insertStatement(
                            tenantId: t,
                            OperationStore.New(
                                id: id, targetId: target, seq: seq, kind: .update, revision: tr.revision + 1, state: ["eta": 9], alert: nil,
                                options: WriteOptions(), consumesQuota: true, quotaDay: day, createdByKeyId: nil, idempotencyKey: id))
                    ]).get()
                }
                func setStatus(_ status: String) throws {
                    try c.execute(
                        "UPDATE targets SET status = $3::text, ended_at = CASE WHEN $3::text = 'ended' THEN now() END WHERE tenant_id = $1 AND id = $2",
                        [t, target, status])
                }
                let (r0, l0) = (try reserved(), try live())
                let flag = try XCTUnwrap(WritePath.writerRows(for: .seq(status: nil), current: tr.status))
                _ = try c.pipeline([.localSettings([flag])]).get()
                try insert(seq: tr.opSeq + 1)
                XCTAssertEqual(try reserved(), r0, "flag on: the insert trigger is not called")
                try setStatus("ended")
                XCTAssertEqual(try live(), l0, "flag on: the target trigger is not called")
                _ = try c.pipeline([WritePath.endOfWriterRows]).get()
                try insert(seq: tr.opSeq + 2)
                XCTAssertEqual(try reserved(), r0 + 1, "cleared: the insert trigger counts again")
                try setStatus("ending")
                XCTAssertEqual(try live(), l0 + 1, "cleared: the target trigger counts again (ended → ending)")
                throw Rollback()
            }
        ) { XCTAssertTrue($0 is Rollback, "\($0)") }
        XCTAssertEqual(try counters(t), try truth(t), "rolled back")
        // Which writes set the flag: an update; an end of a target already `ending`; not an end
        // that moves its target to `ending`.
        let state = TargetWrite.state(revision: 2, state: ["eta": 1], sourceVersion: nil, staleAt: nil, relevanceScore: nil, status: nil)
        XCTAssertNotNil(WritePath.writerRows(for: state, current: .ready))
        XCTAssertNotNil(WritePath.writerRows(for: .seq(status: .ending), current: .ending))
        XCTAssertNil(WritePath.writerRows(for: .seq(status: .ending), current: .ready))
        XCTAssertNil(
            WritePath.writerRows(
                for: .state(revision: 2, state: ["eta": 1], sourceVersion: nil, staleAt: nil, relevanceScore: nil, status: .ending),
                current: .ready))
    }

    /// The operation `target`'s dispatch head row names (nil: no row).
    func headOperation(_ tenant: String, _ target: String) throws -> String? {
        try env.db.system { c in
            try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [tenant, target]).first?.string(
                "operation_id")
        }
    }

    /// `target`'s head as a full recomputation gives it (`lr_dispatch_heads_refresh_set` after
    /// deleting the row), which also leaves that row in place.
    func recomputedHead(_ tenant: String, _ target: String) throws -> String? {
        try env.db.system { c in
            try c.execute("DELETE FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [tenant, target])
            _ = try c.query("SELECT lr_dispatch_heads_refresh_set(ARRAY[$1::text], ARRAY[$2::text])", [tenant, target])
            return try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [tenant, target]).first?
                .string("operation_id")
        }
    }

    /// The tenant's reserved units summed over every day and counter shard, read on `c` (inside
    /// the caller's transaction, so its own uncommitted changes count).
    func reservedUnits(_ c: PostgresConnection, _ tenant: String) throws -> Int64 {
        try c.query("SELECT COALESCE(sum(reserved), 0)::bigint AS r FROM push_quota WHERE tenant_id = $1", [tenant])[0].int64("r")
    }

    /// As if `target`'s start had been delivered (cancelled, so it leaves the queue) and the
    /// activity had registered its update token (`token` twice 32 times: 32 bytes in hex).
    func startDelivered(_ target: String, token: String) throws {
        try env.db.system { c in
            try c.execute("UPDATE operations SET status = 'cancelled' WHERE target_id = $1 AND kind = 'start'", [target])
            try c.execute(
                "UPDATE targets SET status = 'ready', push_token = $2, token_status = 'registered' WHERE id = $1",
                [target, String(repeating: token, count: 32)])
        }
    }

    /// (reserved, used) per day (`YYYY-MM-DD`) summed over the counter shards; days of none left out.
    func countersByDay(_ tenant: String) throws -> [String: Counts] {
        try env.db.system { c in
            var out: [String: Counts] = [:]
            for r in try c.query(
                """
                SELECT day::text AS d, sum(reserved)::bigint AS r, sum(used)::bigint AS u FROM push_quota WHERE tenant_id = $1 GROUP BY day
                """, [tenant])
            {
                out[try r.string("d")] = Counts(reserved: try r.int64("r"), used: try r.int64("u"))
            }
            return out.filter { $0.value != Counts(reserved: 0, used: 0) }
        }
    }

    /// (reserved, used) per day as the operations themselves say; days of none left out.
    func truthByDay(_ tenant: String) throws -> [String: Counts] {
        try env.db.system { c in
            var out: [String: Counts] = [:]
            for r in try c.query(
                """
                SELECT quota_day::text AS d, count(*) FILTER (WHERE status IN ('queued', 'sending'))::bigint AS r,
                       count(*) FILTER (WHERE status IN ('accepted', 'unknown'))::bigint AS u
                  FROM operations WHERE tenant_id = $1 AND consumes_quota AND quota_day IS NOT NULL GROUP BY quota_day
                """, [tenant])
            {
                out[try r.string("d")] = Counts(reserved: try r.int64("r"), used: try r.int64("u"))
            }
            return out.filter { $0.value != Counts(reserved: 0, used: 0) }
        }
    }

    /// (reserved, used) summed over the counter shards of the tenant's days.
    func counters(_ tenant: String) throws -> Counts {
        try env.db.system { c in
            let r = try c.query(
                """
                SELECT COALESCE(sum(reserved), 0)::bigint AS r, COALESCE(sum(used), 0)::bigint AS u FROM push_quota WHERE tenant_id = $1
                """, [tenant])[0]
            return Counts(reserved: try r.int64("r"), used: try r.int64("u"))
        }
    }

    /// (reserved, used) as the operations themselves say.
    func truth(_ tenant: String) throws -> Counts {
        try env.db.system { c in
            let r = try c.query(
                """
                SELECT count(*) FILTER (WHERE status IN ('queued', 'sending'))::bigint AS r,
                       count(*) FILTER (WHERE status IN ('accepted', 'unknown'))::bigint AS u
                  FROM operations WHERE tenant_id = $1 AND consumes_quota
                """, [tenant])[0]
            return Counts(reserved: try r.int64("r"), used: try r.int64("u"))
        }
    }

    struct Counts: Equatable { let reserved: Int64; let used: Int64 }
}

/// A `CommitClaimTaker` that lends every slot and records what it is handed, with the
/// operation's status and lease owner as committed (read after COMMIT, in its own transaction).
final class StubCommitClaimTaker: CommitClaimTaker, @unchecked Sendable {
    let db: Database
    let reserved = Locked(0), released = Locked(0)
    let taken = Locked<[[DispatchOperation]]>([])
    let statusesWhenTaken = Locked<[String]>([])
    /// The lease lent, seconds.
    let lease: Double
    init(db: Database, lease: Double = 30) { self.db = db; self.lease = lease }

    func reserveCommitClaim() -> CommitClaimTerms? {
        reserved.withLock { $0 += 1 }
        return CommitClaimTerms(worker: "stub-worker", leaseSeconds: lease, settings: DispatchStore.claimSettings, clock: Date.init)
    }
    func takeCommitClaim(_ ops: [DispatchOperation], committedAt: Date) {
        taken.withLock { $0.append(ops) }
        guard let op = ops.first else { return }
        let seen = try? db.system { c in
            try c.query("SELECT status, lease_owner FROM operations WHERE tenant_id = $1 AND id = $2", [op.tenantId, op.id]).first.map {
                "\(try $0.string("status")) \(try $0.optionalString("lease_owner") ?? "-")"
            }
        }
        statusesWhenTaken.withLock { $0.append((seen ?? nil) ?? "missing") }
    }
    func releaseCommitClaim(claimed: [DispatchOperation]) { released.withLock { $0 += 1 } }
}
