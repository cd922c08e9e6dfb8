import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore

/// docs/endpoints.md reads and the device target endpoints.
final class LifecycleReadsTests: APITestCase {

    func testWaitUntilReadyIsWokenByTokenRegistration() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let plain = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)", as: w.sender.credential)
        XCTAssertEqual(plain.status, 200)
        XCTAssertEqual(plain["status"], "starting")
        let timeout = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)?wait_until_ready_ms=300", as: w.sender.credential)
        XCTAssertEqual(timeout.status, 409)
        XCTAssertEqual(timeout.errorCode, "TOKEN_PENDING")
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) {
            _ = w.env.call(
                "PUT", "/v1/installations/\(w.installationId)/targets/\(t)/push-token", ["token": "abcdef0123"], as: w.installationCredential)
        }
        let start = Date()
        let ready = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)?wait_until_ready_ms=10000", as: w.sender.credential)
        XCTAssertEqual(ready.status, 200)
        XCTAssertEqual(ready["status"], "ready")
        XCTAssertEqual(ready["token_status"], "registered")
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "woken by NOTIFY, not by the timeout")
        XCTAssertEqual(
            env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)?wait_until_ready_ms=60001", as: w.sender.credential)["error"]?[
                "details"]?["field"], "wait_until_ready_ms")
    }

    func testSnapshotNeedsReadState() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start(["eta": 10])
        XCTAssertEqual(w.update(t, ["eta": 7], revision: 1, extra: ["source_version": 3]).status, 202)
        let s = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)/snapshot", as: w.sender.credential)
        XCTAssertEqual(s.status, 200)
        XCTAssertEqual(s["target_id"]?.stringValue, t)
        XCTAssertEqual(s["revision"], 2)
        XCTAssertEqual(s["state"], ["eta": 7])
        XCTAssertEqual(s["source_version"], 3)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)/snapshot", as: w.tenant.master).status, 403)
        let noRead = try Fixtures.senderKey(env, master: w.tenant.master, targets: [t], permissions: ["activities:update"])
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)/snapshot", as: noRead.credential).status, 403)
    }

    func testOperationsListAndGet() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let u = w.update(t, ["eta": 1], revision: 1)
        let ops = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)/operations", as: w.sender.credential)
        XCTAssertEqual(ops["data"]?.arrayValue?.compactMap { $0["kind"]?.stringValue }, ["update", "start"], "newest first")
        let id = u["operation"]!["id"]!.stringValue!
        let one = env.call("GET", "/v1/remote-updates/operations/\(id)", as: w.sender.credential)
        XCTAssertEqual(one["id"]?.stringValue, id)
        XCTAssertEqual(one["target_id"]?.stringValue, t)
        XCTAssertEqual(one["consumes_quota"], true)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/operations/op_00000000000000000000000000", as: w.sender.credential).status, 404)
    }

    func testListTargetsFiltersAndPaginates() throws {
        let w = try LifecycleWorld.make(env)
        var ids: [String] = []
        for i in 0..<5 { ids.append(w.start(extra: ["business_key": .string("k\(i)"), "business_generation": "1"])) }
        var seen: [String] = []
        var cursor: String?
        repeat {
            let r = env.call(
                "GET", "/v1/remote-updates/live-activities/targets?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""), as: w.sender.credential)
            XCTAssertEqual(r.status, 200)
            for item in r["data"]?.arrayValue ?? [] {
                seen.append(item["id"]!.stringValue!)
                XCTAssertNil(item["state"], "no business state in lists")
            }
            cursor = r["next_cursor"]?.stringValue
        } while cursor != nil
        XCTAssertEqual(seen, ids.sorted())
        let k3 = env.call("GET", "/v1/remote-updates/live-activities/targets?business_key=k3", as: w.sender.credential)
        XCTAssertEqual(k3["data"]?.arrayValue?.count, 1)
        XCTAssertEqual(
            env.call("GET", "/v1/remote-updates/live-activities/targets?status=bogus", as: w.sender.credential)["error"]?["details"]?["field"],
            "status")
        let byMaster = env.call("GET", "/v1/remote-updates/live-activities/targets?status=starting", as: w.tenant.master)
        XCTAssertEqual(byMaster["data"]?.arrayValue?.count, 5)
    }

    func testLocalStartReservationIsIdempotentAcrossCredentialRenewal() throws {
        let w = try LifecycleWorld.make(env)
        let body: JSONValue = [
            "activity_type": "delivery", "business_key": "delivery:9", "business_generation": "1",
            "idempotency_key": "local-1", "state": ["eta": 20]
        ]
        let first = env.call("POST", "/v1/installations/\(w.installationId)/targets", body, as: w.installationCredential)
        XCTAssertEqual(first.status, 201)
        XCTAssertEqual(first["status"], "reserved")
        XCTAssertEqual(first["revision"], 1)
        XCTAssertEqual(first["template_version"]?.stringValue, w.templateVersion, "a local start pins the current template")
        let renewed = env.call("POST", "/v1/installations/\(w.installationId)/credential/renew", [:], as: w.installationCredential)
        let newCred = renewed["credential"]!.stringValue!
        let again = env.call("POST", "/v1/installations/\(w.installationId)/targets", body, as: newCred)
        XCTAssertEqual(again.status, 201, "a replayed creation answers 201 again")
        XCTAssertEqual(again["id"], first["id"])
        // A remote start on the same business instance conflicts with the local one.
        let remote = env.call(
            "POST", "/v1/remote-updates/live-activities/start",
            w.startBody(extra: ["business_key": "delivery:9", "business_generation": "1"]), as: w.sender.credential)
        XCTAssertEqual(remote.errorCode, "BUSINESS_GENERATION_CONFLICT")
        XCTAssertNil(remote["error"]?["details"]?["target_id"], "the sender key does not cover the local target: its id is not shown")
    }

    func testEndedTargetNeverTakesATokenAndRetiredInstallationGets410() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let ended = env.call("POST", "/v1/installations/\(w.installationId)/targets/\(t)/ended", [:], as: w.installationCredential)
        XCTAssertEqual(ended["status"], "ended")
        XCTAssertEqual(ended["end_reason"], "device")
        let ops = try env.db.tenant(w.tenant.id) { c in
            try OperationStore.listForTarget(c, tenantId: w.tenant.id, targetId: t, limit: 10, before: nil).items
        }
        XCTAssertEqual(ops.map(\.status), [.cancelled], "the queued start was cancelled")
        let tok = env.call("PUT", "/v1/installations/\(w.installationId)/targets/\(t)/push-token", ["token": "abcd"], as: w.installationCredential)
        XCTAssertEqual(tok.errorCode, "TARGET_ENDED")
        let t2 = w.start()
        XCTAssertEqual(env.call("POST", "/v1/installations/\(w.installationId)/disconnect", [:], as: w.installationCredential).status, 200)
        let late = env.call("PUT", "/v1/installations/\(w.installationId)/targets/\(t2)/push-token", ["token": "abcd"], as: w.installationCredential)
        XCTAssertEqual(late.status, 410)
        XCTAssertEqual(late.errorCode, "INSTALLATION_RETIRED")
        let target = env.call("GET", "/v1/remote-updates/live-activities/targets/\(t2)", as: w.sender.credential)
        XCTAssertEqual(target["status"], "ended")
        XCTAssertEqual(target["end_reason"], "installation_retired")
        let ops2 = try env.db.tenant(w.tenant.id) { c in
            try OperationStore.listForTarget(c, tenantId: w.tenant.id, targetId: t2, limit: 10, before: nil).items
        }
        XCTAssertEqual(ops2.map(\.status), [.cancelled], "disconnect cancels queued operations")
        XCTAssertEqual(ops2.first?.pendingReason, "installation_retired")
    }

    func testCreationFailedThenRetryNeedsNewGeneration() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start(extra: ["business_key": "b", "business_generation": "1"])
        let f = env.call("POST", "/v1/installations/\(w.installationId)/targets/\(t)/creation-failed", [:], as: w.installationCredential)
        XCTAssertEqual(f["status"], "creation_failed")
        let same = env.call(
            "POST", "/v1/remote-updates/live-activities/start",
            w.startBody(extra: ["business_key": "b", "business_generation": "1"]), as: w.sender.credential)
        XCTAssertEqual(same.errorCode, "BUSINESS_GENERATION_CONFLICT")
        _ = w.start(extra: ["business_key": "b", "business_generation": "2"])
    }

    func testCapabilitiesReportTheLimits() throws {
        let w = try LifecycleWorld.make(env)
        let c = env.call("GET", "/v1/remote-updates/capabilities", as: w.sender.credential)
        XCTAssertEqual(c["limits"]?["apns_payload_bytes"], 4096)
        XCTAssertEqual(c["limits"]?["state_schema_depth"], 12)
        XCTAssertEqual(c["limits"]?["wait_until_ready_ms_max"], 60000)
        XCTAssertEqual(c["permissions"]?.arrayValue?.count, 4)
    }
}
