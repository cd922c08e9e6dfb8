import Foundation
import XCTest
import LiveRelayTestSupport
import LiveRelayCore
import LiveRelayStore
import Locking
import Postgres

/// A `CommitClaimTaker` that lends fan-out slots (`slots` per batch, for any tenant) and records
/// what it is handed and freed; claims at commit are refused (the writes queue as usual).
final class StubFanoutClaimTaker: CommitClaimTaker, @unchecked Sendable {
    let slots: Int
    let taken = Locked<[DispatchOperation]>([])
    let lentAndFreed = Locked<(lent: Int, freed: Int)>((0, 0))
    init(slots: Int) { self.slots = slots }

    func reserveCommitClaim() -> CommitClaimTerms? { nil }
    func takeCommitClaim(_ ops: [DispatchOperation], committedAt: Date) {}
    func releaseCommitClaim(claimed: [DispatchOperation]) {}
    func reserveFanoutClaim(tenantId: String, want: Int) -> (terms: CommitClaimTerms, slots: Int)? {
        let n = min(want, slots)
        lentAndFreed.withLock { $0.lent += n }
        return (CommitClaimTerms(worker: "stub-fanout", leaseSeconds: 30, settings: DispatchStore.claimSettings, clock: Date.init), n)
    }
    func takeFanoutClaim(_ ops: [DispatchOperation], tenantId: String, lent: Int) {
        taken.withLock { $0 += ops }
        lentAndFreed.withLock { $0.freed += lent }
    }
    func releaseFanoutClaim(claimed: [DispatchOperation], tenantId: String, lent: Int) { lentAndFreed.withLock { $0.freed += lent } }
}

/// Claims at fan-out (docs/delivery.md "Claims at fan-out") on real PostgreSQL: the expander
/// inserts in flight exactly the operations a claim would take now, with the claim's effects.
final class FanoutClaimTests: XCTestCase {
    /// Four fan-out members: iOS 17 with its update token registered, iOS 17 without one,
    /// Android (FCM token), and iOS 17 registered but with its start still queued. With enough
    /// slots the expander inserts the first and third in flight (attempt 1, the lent lease, an
    /// APNs timestamp above the target's clock, the clock moved on, no dispatch head) and hands
    /// exactly those over at COMMIT; the tokenless one is queued with a head, the fourth is
    /// queued behind its start. Every lent slot is freed.
    func testTheExpanderInsertsInFlightExactlyWhatAClaimWouldTake() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        var members: [ChannelWorld.Member] = []
        for p in ["ios", "ios", "android", "ios"] { members.append(try w.member(platform: p, osVersion: p == "ios" ? "17.2" : nil)) }
        let key = try w.sender(members.map(\.startTargetId) + [ch])
        for m in members { XCTAssertEqual(w.start(m, channel: ch, as: key).status, 202) }
        let t = w.tenant.id
        let targets: [String] = try w.env.db.system { c in
            try members.map { m in
                try c.query("SELECT id FROM targets WHERE tenant_id = $1 AND start_target_id = $2", [t, m.startTargetId])[0].string("id")
            }
        }
        // Starts accepted (except the fourth's), update tokens registered (except the second's); a clock ahead of now on the first.
        let future = Int64(Date().timeIntervalSince1970) + 1_000
        _ = try w.env.db.system { c in
            try c.execute(
                "UPDATE operations SET status = 'accepted' WHERE tenant_id = $1 AND kind = 'start' AND target_id <> $2", [t, targets[3]])
            try c.execute(
                """
                UPDATE targets SET status = 'ready', push_token = 'tok-' || id, token_status = 'registered'
                 WHERE tenant_id = $1 AND id = ANY($2::text[])
                """, [t, PostgresTextArray([targets[0], targets[3]])])
            try c.execute("UPDATE targets SET status = 'ready' WHERE tenant_id = $1 AND id = $2", [t, targets[2]])
            try c.execute("INSERT INTO target_clocks (tenant_id, target_id, last_timestamp) VALUES ($1, $2, $3)", [t, targets[0], future])
        }
        let taker = StubFanoutClaimTaker(slots: 10)
        w.env.db.commitClaims.register(taker)
        XCTAssertEqual(w.update(ch, ["eta": 2], revision: 0, as: key).status, 202)
        let before = Int64(Date().timeIntervalSince1970)
        let worker = w.worker()
        while worker.expandOnce() > 0 {}

        let rows = try w.env.db.system { c in
            try c.query(
                """
                SELECT o.target_id, o.id, o.status, o.attempts, o.lease_owner, o.provider_timestamp, o.sent_at IS NOT NULL AS sent,
                       (SELECT k.last_timestamp FROM target_clocks k WHERE k.tenant_id = o.tenant_id AND k.target_id = o.target_id) AS clock,
                       EXISTS (SELECT 1 FROM dispatch_heads h WHERE h.tenant_id = o.tenant_id AND h.target_id = o.target_id) AS has_head
                  FROM operations o WHERE o.tenant_id = $1 AND o.channel_operation_id IS NOT NULL
                """, [t])
        }
        var byTarget: [String: PostgresRow] = [:]
        for r in rows { byTarget[try r.string("target_id")] = r }
        XCTAssertEqual(byTarget.count, 4)
        for i in [0, 2] {
            let r = try XCTUnwrap(byTarget[targets[i]])
            XCTAssertEqual(try r.string("status"), "sending", "member \(i)")
            XCTAssertEqual(try r.int("attempts"), 1)
            XCTAssertEqual(try r.optionalString("lease_owner"), "stub-fanout")
            XCTAssertTrue(try r.bool("sent"))
            XCTAssertFalse(try r.bool("has_head"), "member \(i): in flight, no claimable head")
            let ts = try XCTUnwrap(try r.optionalInt64("provider_timestamp"))
            XCTAssertEqual(try r.optionalInt64("clock"), ts, "member \(i): the target's clock moved to the timestamp")
            XCTAssertGreaterThanOrEqual(ts, i == 0 ? future + 1 : before, "member \(i): above the clock and not before now")
        }
        for i in [1, 3] {
            let r = try XCTUnwrap(byTarget[targets[i]])
            XCTAssertEqual(try r.string("status"), "queued", "member \(i)")
            XCTAssertEqual(try r.int("attempts"), 0)
            XCTAssertNil(try r.optionalString("lease_owner"))
            XCTAssertNil(try r.optionalInt64("provider_timestamp"))
        }
        XCTAssertTrue(try XCTUnwrap(byTarget[targets[1]]).bool("has_head"), "tokenless: queued with its head, for the fair claim to park")
        let (headOf3, startOf3) = try w.env.db.system { c in
            (
                try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [t, targets[3]]).first?.string(
                    "operation_id"),
                try c.query("SELECT id FROM operations WHERE tenant_id = $1 AND target_id = $2 AND kind = 'start'", [t, targets[3]])[0].string("id")
            )
        }
        XCTAssertEqual(headOf3, startOf3, "the fourth's update waits behind its queued start, which stays its head")

        let handed = taker.taken.withLock { $0 }
        XCTAssertEqual(
            Set(handed.map(\.id)), Set(try [0, 2].map { try XCTUnwrap(byTarget[targets[$0]]).string("id") }), "handed over: exactly those in flight")
        for op in handed {
            let r = try XCTUnwrap(byTarget[op.targetId])
            XCTAssertEqual(op.attempts, 1)
            XCTAssertEqual(op.providerTimestamp, try r.optionalInt64("provider_timestamp"))
            XCTAssertEqual(op.lastTimestamp, op.providerTimestamp)
            XCTAssertNotNil(op.claimedAt, "the lease's stamp, which fences a return to the queue")
            XCTAssertEqual(op.deviceToken, op.platform == "android" ? op.fcmToken : "tok-\(op.targetId)")
            XCTAssertEqual(op.channelId, ch)
        }
        let slots = taker.lentAndFreed.withLock { $0 }
        XCTAssertEqual(slots.lent, slots.freed, "every lent slot freed")
    }

    /// A channel with `count` Android fan-out members whose starts were accepted (ready, FCM
    /// token registered), a sender key covering them, and a recording taker lending `slots`
    /// per batch, registered on the world's database.
    func readyAndroidMembers(_ w: ChannelWorld, count: Int, slots: Int) throws -> (channel: String, key: Fixtures.Key, taker: StubFanoutClaimTaker) {
        let ch = try w.channel()
        var members: [ChannelWorld.Member] = []
        for _ in 0..<count { members.append(try w.member(platform: "android")) }
        let key = try w.sender(members.map(\.startTargetId) + [ch])
        for m in members { XCTAssertEqual(w.start(m, channel: ch, as: key).status, 202) }
        _ = try w.env.db.system { c in
            try c.execute("UPDATE operations SET status = 'accepted' WHERE tenant_id = $1 AND kind = 'start'", [w.tenant.id])
            try c.execute("UPDATE targets SET status = 'ready' WHERE tenant_id = $1", [w.tenant.id])
        }
        let taker = StubFanoutClaimTaker(slots: slots)
        w.env.db.commitClaims.register(taker)
        return (ch, key, taker)
    }

    /// A member that two writes reach in one walk (an alert, then a newer state) gets both: the
    /// first in flight, the second queued behind it with no dispatch head until the first is
    /// applied, when the second becomes the head.
    func testASecondSendWaitsWithoutAHeadUntilTheFirstIsApplied() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let (ch, key, taker) = try readyAndroidMembers(w, count: 1, slots: 10)
        let t = w.tenant.id
        XCTAssertEqual(w.update(ch, ["eta": 1], revision: 0, as: key, extra: ["alert": ["title": "Goal", "body": "1-0"]]).status, 202)
        XCTAssertEqual(w.update(ch, ["eta": 2], revision: 1, as: key).status, 202)
        while w.worker().expandOnce() > 0 {}
        func rows() throws -> [(id: String, status: String, eta: Int64)] {
            try w.env.db.system { c in
                try c.query(
                    "SELECT id, status, (state ->> 'eta')::bigint AS eta FROM operations WHERE tenant_id = $1 AND channel_operation_id IS NOT NULL ORDER BY seq",
                    [t]
                ).map { (try $0.string("id"), try $0.string("status"), try $0.int64("eta")) }
            }
        }
        func head() throws -> String? {
            try w.env.db.system { c in try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1", [t]).first?.string("operation_id")
            }
        }
        let ops = try rows()
        XCTAssertEqual(ops.map(\.eta), [1, 2], "the alert and the newest state, in commit order")
        XCTAssertEqual(ops.map(\.status), ["sending", "queued"])
        XCTAssertNil(try head(), "nothing claimable while the first is in flight")
        XCTAssertEqual(taker.taken.withLock { $0.map(\.id) }, [ops[0].id])
        _ = try w.env.db.system { c in
            try c.execute("UPDATE operations SET status = 'accepted', lease_owner = NULL WHERE tenant_id = $1 AND id = $2", [t, ops[0].id])
        }
        XCTAssertEqual(try head(), ops[1].id, "applied: the second is now its target's head")
    }

    /// The expander never inserts more in flight than the slots lent: with one slot and two
    /// eligible members, one goes in flight (the first in keyset order) and the other waits queued.
    func testTheExpanderInsertsNoMoreInFlightThanTheSlotsLent() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let (ch, key, taker) = try readyAndroidMembers(w, count: 2, slots: 1)
        let t = w.tenant.id
        XCTAssertEqual(w.update(ch, ["eta": 2], revision: 0, as: key).status, 202)
        while w.worker().expandOnce() > 0 {}
        let statuses = try w.env.db.system { c in
            try c.query(
                "SELECT status FROM operations WHERE tenant_id = $1 AND channel_operation_id IS NOT NULL ORDER BY target_id", [t]
            ).map { try $0.string("status") }
        }
        XCTAssertEqual(statuses, ["sending", "queued"])
        XCTAssertEqual(taker.taken.withLock { $0.count }, 1)
    }
}
