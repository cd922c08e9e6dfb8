import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import Locking
import LiveRelayTestSupport

/// docs/write-semantics.md ordering under concurrency, coalescing and coverage, through the real API.
final class LifecycleConcurrencyTests: APITestCase {

    /// Runs `n` calls on `n` threads at once and returns their replies.
    func concurrently(_ n: Int, _ call: @escaping @Sendable (Int) -> TestEnvironment.Reply) -> [TestEnvironment.Reply] {
        let out = Locked<[TestEnvironment.Reply]>([])
        DispatchQueue.concurrentPerform(iterations: n) { i in
            let r = call(i)
            out.withLock { $0.append(r) }
        }
        return out.withLock { $0 }
    }

    func test50ConcurrentUpdatesWithOneExpectedRevisionCommitOnce() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let replies = concurrently(50) { i in w.update(t, ["eta": .int(Int64(i))], revision: 1) }
        XCTAssertEqual(replies.filter { $0.status == 202 }.count, 1)
        XCTAssertEqual(replies.filter { $0.errorCode == "REVISION_CONFLICT" }.count, 49)
        XCTAssertTrue(replies.filter { $0.status == 409 }.allSatisfy { $0["error"]?["details"]?["current_revision"] == 2 })
    }

    func test20ConcurrentStartsOnOneBusinessGenerationMakeOneTarget() throws {
        let w = try LifecycleWorld.make(env)
        let replies = concurrently(20) { _ in
            w.env.call(
                "POST", "/v1/remote-updates/live-activities/start",
                w.startBody(extra: ["business_key": "order:7", "business_generation": "1"]), as: w.sender.credential)
        }
        let winners = replies.filter { $0.status == 202 }
        XCTAssertEqual(winners.count, 1)
        let holder = winners.first?["target"]?["id"]?.stringValue
        XCTAssertTrue(
            replies.filter { $0.status != 202 }.allSatisfy {
                $0.errorCode == "BUSINESS_GENERATION_CONFLICT" && $0["error"]?["details"]?["target_id"]?.stringValue == holder
            })
        let n = try env.db.tenant(w.tenant.id) { c in
            try c.query("SELECT count(*)::int AS n FROM targets WHERE tenant_id = $1 AND business_key = 'order:7'", [w.tenant.id])[0].int("n")
        }
        XCTAssertEqual(n, 1)
    }

    func testSameIdempotencyKeyConcurrentlyMakesOneOperation() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let body: JSONValue = ["target_id": .string(t), "state": ["eta": 3], "expected_revision": 1, "idempotency_key": "once"]
        let replies = concurrently(10) { _ in w.env.call("POST", "/v1/remote-updates/live-activities/update", body, as: w.sender.credential) }
        XCTAssertTrue(replies.allSatisfy { $0.status == 202 }, replies.map { "\($0.status) \($0.errorCode ?? "")" }.joined(separator: ","))
        XCTAssertEqual(Set(replies.compactMap { $0["operation"]?["id"]?.stringValue }).count, 1)
        XCTAssertEqual(replies.filter { $0.headers["idempotent-replayed"] == "true" }.count, 9)
        let n = try env.db.tenant(w.tenant.id) { c in
            try c.query("SELECT count(*)::int AS n FROM operations WHERE tenant_id = $1 AND target_id = $2 AND kind = 'update'", [w.tenant.id, t])[0]
                .int("n")
        }
        XCTAssertEqual(n, 1)
    }

    func testTenQueuedStateOnlyUpdatesLeaveOneWithASupersededChainAndAlertsKeepTheirPlace() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        var ops: [String] = []
        for rev in 1...10 {
            var extra: [String: JSONValue] = [:]
            if rev == 5 { extra["alert"] = ["title": "Halfway", "body": "Your order is on its way"] }
            let r = w.update(t, ["eta": .int(Int64(rev))], revision: Int64(rev), extra: extra)
            XCTAssertEqual(r.status, 202)
            ops.append(r["operation"]!["id"]!.stringValue!)
        }
        let rows = try env.db.tenant(w.tenant.id) { c in
            try OperationStore.listForTarget(c, tenantId: w.tenant.id, targetId: t, limit: 50, before: nil).items
        }
        let byId = Dictionary(uniqueKeysWithValues: rows.map { ($0.id, $0) })
        let queued = rows.filter { $0.kind == .update && $0.status == .queued }.map(\.id)
        XCTAssertEqual(Set(queued), [ops[4], ops[9]], "the alert update and the newest state-only update remain")
        for (i, id) in ops.enumerated() where i != 4 && i != 9 {
            XCTAssertEqual(byId[id]?.status, .superseded, "update \(i + 1)")
            XCTAssertEqual(byId[id]?.supersededBy, ops[i + 1], "each is superseded by the next state-bearing write")
        }
        XCTAssertEqual(byId[ops[4]]?.hasAlert, true)
        // An end supersedes every queued update, alerts included.
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(t), "idempotency_key": "end"], as: w.sender.credential)
        let endId = end["operation"]!["id"]!.stringValue!
        let after = try env.db.tenant(w.tenant.id) { c in try OperationStore.queued(c, tenantId: w.tenant.id, targetId: t) }
        XCTAssertEqual(after.map(\.kind), [.start, .end])
        let alertOp = try env.db.tenant(w.tenant.id) { c in try OperationStore.get(c, tenantId: w.tenant.id, id: ops[4]) }
        XCTAssertEqual(alertOp?.supersededBy, endId)
    }

    func testCreatedFromCoversOnlyThisKeysInstances() throws {
        let w = try LifecycleWorld.make(env)
        let mine = w.start()
        let other = try Fixtures.senderKey(env, master: w.tenant.master, targets: [w.startTargetId], createdFrom: [w.startTargetId])
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: other.credential)
        let theirs = r["target"]!["id"]!.stringValue!
        XCTAssertEqual(w.update(mine, ["eta": 1], revision: 1).status, 202)
        XCTAssertEqual(w.update(theirs, ["eta": 1], revision: 1).status, 403, "created_from never covers another key's instance")
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(theirs)", as: w.sender.credential).status, 403)
        let list = env.call("GET", "/v1/remote-updates/live-activities/targets", as: w.sender.credential)
        XCTAssertEqual(list["data"]?.arrayValue?.compactMap { $0["id"]?.stringValue }, [mine])
    }

    func testStartOnlyKeyCannotUpdateWhatItCreated() throws {
        let w = try LifecycleWorld.make(env, permissions: ["activities:start"])
        let t = w.start()
        let r = w.update(t, ["eta": 1], revision: 1)
        XCTAssertEqual(r.status, 403)
        XCTAssertEqual(r.errorCode, "PERMISSION_DENIED")
    }

    func testOtherTenantsTargetIsNotFound() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let other = try LifecycleWorld.make(env)
        XCTAssertEqual(other.update(t, ["eta": 1], revision: 1).status, 404)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)", as: other.sender.credential).status, 404)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)", as: other.tenant.master).status, 404)
    }
}
