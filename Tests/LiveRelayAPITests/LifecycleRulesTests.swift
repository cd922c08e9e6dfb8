import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/write-semantics.md rules, one per error code, each at its boundary, through the real API.
final class LifecycleRulesTests: APITestCase {

    func testStartCommitsTargetAndOperationBefore202() throws {
        let w = try LifecycleWorld.make(env)
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(r.status, 202)
        XCTAssertEqual(r["target"]?["status"], "starting")
        XCTAssertEqual(r["target"]?["revision"], 1)
        XCTAssertEqual(r["operation"]?["kind"], "start")
        XCTAssertEqual(r["operation"]?["status"], "queued")
        XCTAssertNil(r["target"]?["state"], "a target object carries no business state")
        let tgt = r["target"]!["id"]!.stringValue!
        let count = try env.db.tenant(w.tenant.id) { c in
            try c.query("SELECT count(*)::int AS n FROM operations WHERE tenant_id = $1 AND target_id = $2", [w.tenant.id, tgt])[0].int("n")
        }
        XCTAssertEqual(count, 1)
    }

    func testStartNeedsReadyStartTarget() throws {
        let w = try LifecycleWorld.make(env, ready: false)
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(r.status, 409)
        XCTAssertEqual(r.errorCode, "TOKEN_PENDING")
    }

    func testStartTemplateVersionMustMatch() throws {
        let w = try LifecycleWorld.make(env)
        let r = env.call(
            "POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: ["template_version": "tv_other"]), as: w.sender.credential)
        XCTAssertEqual(r.errorCode, "TEMPLATE_VERSION_MISMATCH")
        XCTAssertEqual(r["error"]?["details"]?["current_template_version"]?.stringValue, w.templateVersion)
    }

    func testStartRequiresAlert() throws {
        let w = try LifecycleWorld.make(env)
        guard case .object(var o) = w.startBody() else { return XCTFail() }
        o["alert"] = nil
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", .object(o), as: w.sender.credential)
        XCTAssertEqual(r.status, 400)
        XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
        XCTAssertEqual(r["error"]?["details"]?["field"], "alert")
    }

    func testBusinessGenerationConflictNamesTheHolder() throws {
        let w = try LifecycleWorld.make(env)
        let first = w.start(extra: ["business_key": "delivery:42", "business_generation": "1"])
        let r = env.call(
            "POST", "/v1/remote-updates/live-activities/start",
            w.startBody(extra: ["business_key": "delivery:42", "business_generation": "1"]), as: w.sender.credential)
        XCTAssertEqual(r.status, 409)
        XCTAssertEqual(r.errorCode, "BUSINESS_GENERATION_CONFLICT")
        XCTAssertEqual(r["error"]?["details"]?["target_id"]?.stringValue, first)
        _ = w.start(extra: ["business_key": "delivery:42", "business_generation": "2"])  // a new generation is a new lifecycle
    }

    func testStartStaleAtMustBeInTheFuture() throws {
        let w = try LifecycleWorld.make(env)
        let past = Timestamp.format(Date().addingTimeInterval(-1))
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: ["stale_at": .string(past)]), as: w.sender.credential)
        XCTAssertEqual(r["error"]?["details"]?["field"], "stale_at")
    }

    /// PostgreSQL cannot store U+0000: it is refused as bad input (400 naming the field), never a 500.
    func testNulCharacterIsRejectedWithTheField() throws {
        let w = try LifecycleWorld.make(env)
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(["note": "a\u{0}b"]), as: w.sender.credential)
        XCTAssertEqual(r.status, 400)
        XCTAssertEqual(r["error"]?["details"]?["field"], "state.note")
        let q = env.call("GET", "/v1/remote-updates/live-activities/targets?business_key=%00", as: w.sender.credential)
        XCTAssertLessThan(q.status, 500)
        let p = env.call("GET", "/v1/remote-updates/sender-keys/sk_%00", as: w.tenant.master)
        XCTAssertLessThan(p.status, 500)
    }

    func testUnknownFieldsAreRejected() throws {
        let w = try LifecycleWorld.make(env)
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: ["colour": "red"]), as: w.sender.credential)
        XCTAssertEqual(r.status, 400)
        XCTAssertEqual(r["error"]?["details"]?["field"], "colour")
    }

    func testRevisionConflictCarriesCurrentRevision() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        XCTAssertEqual(w.update(t, ["eta": 9], revision: 1).status, 202)
        let r = w.update(t, ["eta": 8], revision: 1)
        XCTAssertEqual(r.status, 409)
        XCTAssertEqual(r.errorCode, "REVISION_CONFLICT")
        XCTAssertEqual(r["error"]?["details"]?["current_revision"], 2)
        XCTAssertEqual(w.update(t, ["eta": 8], revision: 2)["target"]?["revision"], 3)
    }

    func testSourceVersionMustIncrease() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        XCTAssertEqual(w.update(t, ["eta": 9], revision: 1, extra: ["source_version": 5]).status, 202)
        XCTAssertEqual(w.update(t, ["eta": 8], revision: 2, extra: ["source_version": 5]).errorCode, "SOURCE_VERSION_CONFLICT")
        XCTAssertEqual(w.update(t, ["eta": 8], revision: 2, extra: ["source_version": 4]).errorCode, "SOURCE_VERSION_CONFLICT")
        XCTAssertEqual(w.update(t, ["eta": 8], revision: 2, extra: ["source_version": 6]).status, 202)
    }

    func testStateMustMatchPinnedSchema() throws {
        let schema: JSONValue = ["type": "object", "properties": ["eta": ["type": "integer", "minimum": 0]], "required": ["eta"]]
        let w = try LifecycleWorld.make(env, schema: schema)
        let bad = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(["eta": "soon"]), as: w.sender.credential)
        XCTAssertEqual(bad.status, 422)
        XCTAssertEqual(bad.errorCode, "STATE_SCHEMA_MISMATCH")
        XCTAssertEqual(bad["error"]?["details"]?["pointer"], "/eta")
        let t = w.start(["eta": 5])
        let r = w.update(t, ["eta": -1], revision: 1)
        XCTAssertEqual(r.errorCode, "STATE_SCHEMA_MISMATCH")
        XCTAssertEqual(r["error"]?["details"]?["pointer"], "/eta")
        XCTAssertEqual(w.update(t, [:], revision: 1)["error"]?["details"]?["pointer"], "")
    }

    func testStateShapeLimits() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        XCTAssertEqual(w.update(t, "not an object", revision: 1)["error"]?["details"]?["field"], "state")
        var deep: JSONValue = 1
        for _ in 0..<11 { deep = ["d": deep] }
        XCTAssertEqual(w.update(t, ["d": deep], revision: 1).status, 202, "12 levels pass")
        XCTAssertEqual(w.update(t, ["d": ["d": deep]], revision: 2).status, 400, "13 levels fail")
    }

    /// The APNs body of an update is measured exactly: 4096 bytes pass, 4097 fail (multi-byte padding).
    func testAPNsPayloadBoundary() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        func size(_ pad: String) -> Int {
            DeliveryPayload.apns(
                DeliveryPayload.Content(
                    event: .update, targetId: t, revision: 2, templateVersion: w.templateVersion,
                    state: ["p": .string(pad)], alert: nil, staleAt: nil, relevanceScore: nil, dismissAt: nil),
                timestamp: Date()
            ).bytes().count
        }
        let base = size("")
        let fits = String(repeating: "a", count: 4096 - base)
        XCTAssertEqual(size(fits), 4096)
        let ok = w.update(t, ["p": .string(fits)], revision: 1)
        XCTAssertEqual(ok.status, 202, String(decoding: ok.raw, as: UTF8.self))
        // 4097 bytes: one "é" (2 bytes) in place of one "a".
        let over = "é" + String(repeating: "a", count: 4096 - base - 1)
        XCTAssertEqual(size(over), 4097)
        let r = w.update(t, ["p": .string(over)], revision: 2)
        XCTAssertEqual(r.status, 413)
        XCTAssertEqual(r.errorCode, "PAYLOAD_TOO_LARGE")
        XCTAssertEqual(r["error"]?["details"]?["bytes"], 4097)
        XCTAssertEqual(r["error"]?["details"]?["limit"], 4096)
        let rev = try env.db.tenant(w.tenant.id) { c in try TargetStore.get(c, tenantId: w.tenant.id, id: t)!.revision }
        XCTAssertEqual(rev, 2, "nothing committed for the rejected write")
    }

    func testQuotaBoundaryAndResetsAt() throws {
        let w = try LifecycleWorld.make(env, quota: 3)
        let t = w.start()  // 1 reserved
        _ = w.start()  // 2
        _ = w.start()  // 3: the quota is reached
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(r.status, 429)
        XCTAssertEqual(r.errorCode, "QUOTA_EXCEEDED")
        XCTAssertEqual(r["error"]?["details"]?["resets_at"]?.stringValue, Timestamp.format(WriteRules.quotaResetsAt(Date())))
        XCTAssertEqual(w.update(t, ["eta": 1], revision: 1).errorCode, "QUOTA_EXCEEDED", "updates are state-bearing: they count")
        // A stateless end never counts.
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(t), "idempotency_key": "e1"], as: w.sender.credential)
        XCTAssertEqual(end.status, 202)
        let usage = env.call("GET", "/v1/remote-updates/usage", as: w.sender.credential)
        XCTAssertEqual(usage["limit"], 3)
        XCTAssertEqual(usage["reserved"], 3)
        XCTAssertEqual(usage["remaining"], 0)
    }

    /// Superseded updates give their reserved unit back (docs/write-semantics.md Quota).
    func testSupersededUpdatesReleaseQuota() throws {
        let w = try LifecycleWorld.make(env, quota: 3)
        let t = w.start()
        for rev in 1...5 { XCTAssertEqual(w.update(t, ["eta": .int(Int64(rev))], revision: Int64(rev)).status, 202, "update \(rev)") }
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/usage", as: w.sender.credential)["reserved"], 2)
    }

    func testEndedTargetRefusesUpdatesButStatelessEndReturnsCancelled() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let end = env.call("POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(t), "idempotency_key": "e1"], as: w.tenant.master)
        XCTAssertEqual(end.status, 202, "the master key may end without new state")
        XCTAssertEqual(end["target"]?["status"], "ending")
        XCTAssertEqual(w.update(t, ["eta": 1], revision: 1).errorCode, "TARGET_ENDED")
        try env.db.tenant(w.tenant.id) { c in try TargetStore.setStatus(c, tenantId: w.tenant.id, id: t, status: .ended, endReason: "sender") }
        let again = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(t), "idempotency_key": "e2"], as: w.sender.credential)
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(again["operation"]?["status"], "cancelled")
        XCTAssertEqual(again["operation"]?["pending_reason"], "already_ended")
        let final = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(t), "idempotency_key": "e3", "state": ["eta": 0], "expected_revision": 1], as: w.sender.credential)
        XCTAssertEqual(final.errorCode, "TARGET_ENDED")
    }

    func testEndWithStateNeedsExpectedRevisionAndMasterCannotSendState() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let r = env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(t), "idempotency_key": "e", "state": ["eta": 0]],
            as: w.sender.credential)
        XCTAssertEqual(r["error"]?["details"]?["field"], "expected_revision")
        let m = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(t), "idempotency_key": "e", "state": ["eta": 0], "expected_revision": 1], as: w.tenant.master)
        XCTAssertEqual(m.status, 403)
    }

    func testDismissAtBoundary() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let tooLate = Timestamp.format(Date().addingTimeInterval(4 * 3600 + 60))
        XCTAssertEqual(
            env.call(
                "POST", "/v1/remote-updates/live-activities/end",
                ["target_id": .string(t), "idempotency_key": "e", "dismiss_at": .string(tooLate)], as: w.sender.credential)["error"]?["details"]?[
                    "field"], "dismiss_at")
        let ok = Timestamp.format(Date().addingTimeInterval(4 * 3600 - 60))
        XCTAssertEqual(
            env.call(
                "POST", "/v1/remote-updates/live-activities/end",
                ["target_id": .string(t), "idempotency_key": "e2", "dismiss_at": .string(ok)], as: w.sender.credential
            ).status, 202)
    }

    func testWriteReplayAndKeyReuse() throws {
        let w = try LifecycleWorld.make(env)
        let body = w.startBody(key: "same")
        let a = env.call("POST", "/v1/remote-updates/live-activities/start", body, as: w.sender.credential)
        let b = env.call("POST", "/v1/remote-updates/live-activities/start", body, as: w.sender.credential)
        XCTAssertEqual(a.status, 202)
        XCTAssertEqual(b.status, 202)
        XCTAssertEqual(b.headers["idempotent-replayed"], "true")
        XCTAssertEqual(a.raw, b.raw)
        let c = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(["eta": 99], key: "same"), as: w.sender.credential)
        XCTAssertEqual(c.status, 422)
        XCTAssertEqual(c.errorCode, "IDEMPOTENCY_KEY_REUSED")
    }
}
