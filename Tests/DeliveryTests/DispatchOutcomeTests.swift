import Foundation
import XCTest
import Delivery
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// Every result class of a send and its effect on operation, target, start target,
/// installation and quota (docs/write-semantics.md, docs/providers.md), through a real dispatcher, real PostgreSQL and a
/// scripted fake sender.
final class DispatchOutcomeTests: DispatchTestCase {

    func testAcceptedUpdateStoresApnsIdConsumesQuotaAndSendsTheSnapshot() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "aa01")
        let op = try h.update(t, target: tgt, state: ["eta": 5, "driver": "Ana"])
        XCTAssertEqual(try h.quota(t).reserved, 1)
        let fake = h.fakeSender()
        fake.script(op, [.outcome(.accepted(providerId: "A1B2C3D4-0000-0000-0000-000000000001"))])
        h.dispatcher(fake)
        let rec = try h.waitFor(t, op, .accepted)
        XCTAssertEqual(rec.apnsId, "A1B2C3D4-0000-0000-0000-000000000001")
        XCTAssertNotNil(rec.acceptedAt)
        XCTAssertEqual(rec.attempts, 1)
        let q = try h.quota(t)
        XCTAssertEqual(q.reserved, 0); XCTAssertEqual(q.used, 1)
        let call = try XCTUnwrap(fake.calls.first)
        XCTAssertEqual(call.push.deviceToken, "aa01")
        XCTAssertEqual(call.push.platform, "ios")
        XCTAssertEqual(call.push.appId, "com.example.app")
        XCTAssertEqual(call.push.environment, "sandbox")
        XCTAssertEqual(call.body["aps"]?["event"]?.stringValue, "update")
        XCTAssertEqual(call.body["aps"]?["content-state"], ["eta": 5, "driver": "Ana"])
        XCTAssertNil(call.body["aps"]?["alert"], "an update carries alert only when the request had one")
        XCTAssertEqual(call.push.priority, 10)
        // apns-expiration defaults to now + LIVERELAY_DEFAULT_EXPIRATION_SECONDS (3600 here).
        XCTAssertEqual(call.push.expiration.timeIntervalSinceNow, 3600, accuracy: 30)
        let pt = try h.row("SELECT provider_timestamp FROM operations WHERE tenant_id = $1 AND id = $2", [t, op]).int64("provider_timestamp")
        XCTAssertEqual(pt, call.timestamp)
        XCTAssertEqual(
            try h.row("SELECT last_timestamp FROM target_clocks WHERE tenant_id = $1 AND target_id = $2", [t, tgt]).int64("last_timestamp"), pt)
        XCTAssertEqual(Double(pt), Date().timeIntervalSince1970, accuracy: 30)
    }

    func testIOSStartAcceptedWaitsForTheUpdateTokenThenSendsQueuedUpdate() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let st = try h.startTarget(t, installation: inst, token: "p2s-token")
        let (tgt, start) = try h.remoteStart(t, startTarget: st, expiresAt: Date().addingTimeInterval(600))
        let fake = h.fakeSender()
        h.dispatcher(fake)
        try h.waitFor(t, start, .accepted)
        XCTAssertEqual(try h.targetRecord(t, tgt).status, .tokenPending)
        let call = try XCTUnwrap(fake.calls(for: start).first)
        XCTAssertEqual(call.push.deviceToken, "p2s-token", "a start goes to the push-to-start token")
        XCTAssertEqual(call.body["aps"]?["attributes-type"]?.stringValue, "DeliveryAttributes")
        XCTAssertEqual(call.body["aps"]?["attributes"]?["target_id"]?.stringValue, tgt)
        XCTAssertEqual(call.body["aps"]?["attributes"]?["business_key"]?.stringValue, "delivery:42")
        XCTAssertEqual(call.body["aps"]?["input-push-token"], 1)
        XCTAssertEqual(call.body["aps"]?["alert"]?["title"]?.stringValue, "Order")
        XCTAssertEqual(Int64(call.push.expiration.timeIntervalSince1970), Int64(try h.operation(t, start).expiresAt!.timeIntervalSince1970))

        // An update before the token: parked as token_pending, not sent.
        let up = try h.update(t, target: tgt, state: ["eta": 2])
        try eventually("parked") { try h.operation(t, up).pendingReason == "token_pending" }
        XCTAssertEqual(try h.operation(t, up).status, .queued)
        XCTAssertTrue(fake.calls(for: up).isEmpty)
        // The device registers its update token: the trigger un-parks and wakes the dispatcher.
        _ = try h.db.tenant(t) { c in try TargetStore.setPushToken(c, tenantId: t, id: tgt, token: "upd-token") }
        try h.waitFor(t, up, .accepted, within: 3)
        XCTAssertEqual(fake.calls(for: up).first?.push.deviceToken, "upd-token")
        XCTAssertEqual(try h.targetRecord(t, tgt).status, .ready)
    }

    func testAndroidStartAcceptedMakesTargetReadyAndSendsFCMData() throws {
        let t = try h.tenant(), inst = try h.installation(t, platform: "android", fcmToken: "fcm-1")
        let st = try h.startTarget(t, installation: inst, token: nil)
        let (tgt, start) = try h.remoteStart(t, startTarget: st, platform: "android")
        let fake = h.fakeSender()
        h.dispatcher(fake)
        try h.waitFor(t, start, .accepted)
        XCTAssertEqual(try h.targetRecord(t, tgt).status, .ready)
        let call = try XCTUnwrap(fake.calls.first)
        XCTAssertNil(call.push.apnsBody)
        XCTAssertEqual(call.push.deviceToken, "fcm-1")
        let data = try XCTUnwrap(call.body["message"]?["data"])
        XCTAssertEqual(data["event"]?.stringValue, "start")
        XCTAssertEqual(data["target_id"]?.stringValue, tgt)
        XCTAssertEqual(data["revision"]?.stringValue, "1")
        XCTAssertEqual(call.body["message"]?["token"]?.stringValue, "fcm-1")
    }

    func testEndAcceptedEndsTargetAndStatelessEndSendsCurrentState() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let a = try h.target(t, installation: inst, token: "tok-a", state: ["eta": 7])
        let b = try h.target(t, installation: inst, token: "tok-b")
        let dismiss = Date().addingTimeInterval(600)
        let endA = try h.end(t, target: a, dismissAt: dismiss)
        let endB = try h.end(t, target: b, state: ["eta": 0])
        let fake = h.fakeSender()
        h.dispatcher(fake)
        try h.waitFor(t, endA, .accepted)
        try h.waitFor(t, endB, .accepted)
        for (tgt, _) in [(a, endA), (b, endB)] {
            let r = try h.targetRecord(t, tgt)
            XCTAssertEqual(r.status, .ended); XCTAssertEqual(r.endReason, "sender")
        }
        let ca = try XCTUnwrap(fake.calls(for: endA).first)
        XCTAssertEqual(ca.body["aps"]?["event"]?.stringValue, "end")
        XCTAssertEqual(ca.body["aps"]?["content-state"], ["eta": 7], "a stateless end carries the target's current state")
        XCTAssertEqual(ca.body["aps"]?["dismissal-date"], .int(Timestamp.epochSeconds(dismiss)))
        XCTAssertEqual(fake.calls(for: endB).first?.body["aps"]?["content-state"], ["eta": 0])
        let q = try h.quota(t)
        XCTAssertEqual(q.used, 1, "only the state-bearing end counts"); XCTAssertEqual(q.reserved, 0)
    }

    func testDeadUpdateTokenEndsTargetAndCancelsQueuedWork() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "dead")
        let first = try h.update(t, target: tgt, state: ["eta": 1], alert: PushAlert(title: "a", body: "b"))
        let second = try h.update(t, target: tgt, state: ["eta": 2])
        let fake = h.fakeSender()
        fake.script(first, [.outcome(.tokenDead(providerStatus: 410, providerReason: "Unregistered"))])
        h.dispatcher(fake)
        let rec = try h.waitFor(t, first, .failed)
        XCTAssertEqual(rec.failure?["code"]?.stringValue, "TOKEN_INVALID")
        XCTAssertEqual(rec.failure?["provider_status"], 410)
        XCTAssertEqual(rec.failure?["provider_reason"]?.stringValue, "Unregistered")
        let r = try h.targetRecord(t, tgt)
        XCTAssertEqual(r.status, .ended); XCTAssertEqual(r.endReason, "token_invalid"); XCTAssertEqual(r.tokenStatus, "invalid")
        let s = try h.operation(t, second)
        XCTAssertEqual(s.status, .cancelled); XCTAssertEqual(s.pendingReason, "token_invalid")
        XCTAssertEqual(try h.quota(t).reserved, 0); XCTAssertEqual(try h.quota(t).used, 0)
        XCTAssertTrue(fake.calls(for: second).isEmpty)
    }

    func testDeadPushToStartTokenMakesStartTargetPendingAndFailsTheStart() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let st = try h.startTarget(t, installation: inst, token: "p2s-dead")
        let (tgt, start) = try h.remoteStart(t, startTarget: st)
        let fake = h.fakeSender()
        fake.script(start, [.outcome(.tokenDead(providerStatus: 400, providerReason: "BadDeviceToken"))])
        h.dispatcher(fake)
        let rec = try h.waitFor(t, start, .failed)
        XCTAssertEqual(rec.failure?["code"]?.stringValue, "TOKEN_INVALID")
        let s = try h.row("SELECT status, push_to_start_token FROM start_targets WHERE tenant_id = $1 AND id = $2", [t, st])
        XCTAssertEqual(try s.string("status"), "pending")
        XCTAssertNil(try s.optionalString("push_to_start_token"))
        XCTAssertEqual(try h.targetRecord(t, tgt).status, .creationFailed)
        XCTAssertEqual(try h.quota(t).reserved, 0)
    }

    func testDeadFCMTokenClearsTheInstallationTokenAndParksTargets() throws {
        let t = try h.tenant(), inst = try h.installation(t, platform: "android", fcmToken: "fcm-dead")
        let tgt = try h.target(t, installation: inst, token: nil, platform: "android")
        let up = try h.update(t, target: tgt, state: ["eta": 3])
        let fake = h.fakeSender()
        fake.script(up, [.outcome(.tokenDead(providerStatus: 404, providerReason: "UNREGISTERED"))])
        h.dispatcher(fake)
        XCTAssertEqual(try h.waitFor(t, up, .failed).failure?["code"]?.stringValue, "TOKEN_INVALID")
        XCTAssertNil(try h.row("SELECT fcm_token FROM installations WHERE tenant_id = $1 AND id = $2", [t, inst]).optionalString("fcm_token"))
        let r = try h.targetRecord(t, tgt)
        XCTAssertEqual(r.status, .tokenPending); XCTAssertEqual(r.tokenStatus, "pending")
        // Work queued meanwhile waits for a new FCM token, then goes out.
        let next = try h.update(t, target: tgt, state: ["eta": 1])
        try eventually("parked") { try h.operation(t, next).pendingReason == "token_pending" }
        try h.db.tenant(t) { c in try InstallationStore.setFCMToken(c, tenantId: t, id: inst, token: "fcm-new") }
        try h.waitFor(t, next, .accepted, within: 3)
        XCTAssertEqual(fake.calls(for: next).first?.push.deviceToken, "fcm-new")
        XCTAssertEqual(try h.targetRecord(t, tgt).status, .ready)
    }

    func testCredentialFailureAndNoCredentialsFailWithReleasedQuota() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let a = try h.target(t, installation: inst, token: "x1"), b = try h.target(t, installation: inst, token: "x2")
        let opA = try h.update(t, target: a, state: ["v": 1]), opB = try h.update(t, target: b, state: ["v": 1])
        let st = try h.startTarget(t, installation: inst, token: "p2s")
        let (startTgt, start) = try h.remoteStart(t, startTarget: st)
        let fake = h.fakeSender()
        fake.script(opA, [.outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "InvalidProviderToken"))])
        fake.script(opB, [.noCredentials("no APNs key for com.example.app")])
        fake.script(start, [.outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "BadTopic"))])
        h.dispatcher(fake)
        let ra = try h.waitFor(t, opA, .failed)
        XCTAssertEqual(ra.failure?["code"]?.stringValue, "PROVIDER_CREDENTIALS_INVALID")
        XCTAssertEqual(ra.failure?["provider_status"], 403)
        XCTAssertEqual(ra.failure?["provider_reason"]?.stringValue, "InvalidProviderToken")
        XCTAssertNotNil(ra.failure?["message"]?.stringValue)
        let rb = try h.waitFor(t, opB, .failed)
        XCTAssertEqual(rb.failure?["code"]?.stringValue, "PROVIDER_CREDENTIALS_INVALID")
        XCTAssertEqual(rb.failure?["provider_status"], .null)
        try h.waitFor(t, start, .failed)
        XCTAssertEqual(try h.targetRecord(t, startTgt).status, .creationFailed)
        XCTAssertEqual(try h.targetRecord(t, a).status, .ready, "a failed update leaves the target alone")
        let q = try h.quota(t)
        XCTAssertEqual(q.reserved, 0); XCTAssertEqual(q.used, 0)
    }

    func testRetryAndNotProcessedAreResentWithBackoffAndRetryAfterFloor() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let a = try h.target(t, installation: inst, token: "r1"), b = try h.target(t, installation: inst, token: "r2")
        let opA = try h.update(t, target: a, state: ["v": 1], alert: PushAlert(title: "t", body: "b"))
        let opB = try h.update(t, target: b, state: ["v": 1])
        let fake = h.fakeSender()
        fake.script(opA, [.outcome(.retry(after: 1))])
        fake.script(opB, [.notProcessed("GOAWAY last_stream_id 1 < 3"), .notProcessed("refused stream")])
        h.dispatcher(fake)
        try eventually("requeued with Retry-After") { try h.operation(t, opA).pendingReason == "provider_retry" || fake.calls(for: opA).count >= 2 }
        try h.waitFor(t, opA, .accepted, within: 5)
        try h.waitFor(t, opB, .accepted, within: 5)
        let ca = fake.calls(for: opA), cb = fake.calls(for: opB)
        XCTAssertEqual(ca.count, 2); XCTAssertEqual(cb.count, 3)
        XCTAssertGreaterThanOrEqual(ca[1].at.timeIntervalSince(ca[0].at), 0.95, "Retry-After: 1 is a floor")
        // Backoff (base 0.1 s, random 0.5): 0.05 s then 0.1 s at least.
        XCTAssertGreaterThanOrEqual(cb[1].at.timeIntervalSince(cb[0].at), 0.05)
        XCTAssertGreaterThanOrEqual(cb[2].at.timeIntervalSince(cb[1].at), 0.1)
        XCTAssertEqual(Set(ca.map(\.timestamp)).count, 1, "a resend keeps its APNs timestamp")
        XCTAssertNotEqual(ca[0].push.apnsId, ca[1].push.apnsId, "each attempt has its own apns-id")
        XCTAssertEqual(try h.operation(t, opA).attempts, 2)
        XCTAssertEqual(try h.operation(t, opB).attempts, 3)
        XCTAssertEqual(try h.quota(t).used, 2)
    }

    func testPossiblyProcessedStartAndAlertBecomeUnknownStateOnlyAndStatelessEndAreResentOnce() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let st = try h.startTarget(t, installation: inst, token: "p2s")
        let (startTgt, start) = try h.remoteStart(t, startTarget: st)
        let a = try h.target(t, installation: inst, token: "u1"), b = try h.target(t, installation: inst, token: "u2")
        let c = try h.target(t, installation: inst, token: "u3")
        let alertOp = try h.update(t, target: a, state: ["v": 1], alert: PushAlert(title: "Hi", body: "there"))
        let stateOp = try h.update(t, target: b, state: ["v": 2])
        let endOp = try h.end(t, target: c)
        let fake = h.fakeSender()
        for op in [start, alertOp, stateOp, endOp] { fake.script(op, [.possiblyProcessed("connection lost after sending")]) }
        h.dispatcher(fake)
        let s = try h.waitFor(t, start, .unknown)
        XCTAssertEqual(s.failure?["code"]?.stringValue, "OUTCOME_UNKNOWN")
        XCTAssertEqual(try h.targetRecord(t, startTgt).status, .startUnknown)
        try h.waitFor(t, alertOp, .unknown)
        try h.waitFor(t, stateOp, .accepted)
        try h.waitFor(t, endOp, .accepted)
        Thread.sleep(forTimeInterval: 0.6)  // nothing else goes out
        XCTAssertEqual(fake.calls(for: start).count, 1, "a start is never resent")
        XCTAssertEqual(fake.calls(for: alertOp).count, 1, "an alert is never resent")
        let sc = fake.calls(for: stateOp)
        XCTAssertEqual(sc.count, 2, "a state-only update is resent once")
        XCTAssertEqual(sc[0].timestamp, sc[1].timestamp, "idempotent by timestamp")
        XCTAssertEqual(fake.calls(for: endOp).count, 2)
        XCTAssertEqual(try h.targetRecord(t, c).status, .ended)
        // Unknown start and alert consume their unit (they may have been delivered); the state-only update is accepted.
        let q = try h.quota(t)
        XCTAssertEqual(q.used, 3); XCTAssertEqual(q.reserved, 0)
    }

    func testExpiresAtPassedBecomesExpiredUnsentWithQuotaReleased() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let tgt = try h.target(t, installation: inst, token: "e1")
        let op = try h.update(t, target: tgt, state: ["v": 1], expiresAt: Date().addingTimeInterval(60))
        // A second operation, parked behind a missing token, also expires.
        let pendingTgt = try h.target(t, installation: inst, token: nil)
        let parked = try h.update(t, target: pendingTgt, state: ["v": 1], expiresAt: Date().addingTimeInterval(60))
        _ = try h.db.system { c in
            try c.execute(
                "UPDATE operations SET expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND id = ANY($2::text[])",
                [t, PostgresTextArray([op, parked])])
        }
        // A retried operation whose backoff would pass expires_at is expired instead.
        let other = try h.target(t, installation: inst, token: "e2")
        let op2 = try h.update(t, target: other, state: ["v": 2], expiresAt: Date().addingTimeInterval(3))
        let fake = h.fakeSender()
        fake.script(op2, [.outcome(.retry(after: 5))])
        h.dispatcher(fake)
        try h.waitFor(t, op, .expired)
        try h.waitFor(t, parked, .expired)
        try h.waitFor(t, op2, .expired)
        XCTAssertTrue(fake.calls(for: op).isEmpty); XCTAssertTrue(fake.calls(for: parked).isEmpty)
        XCTAssertEqual(fake.calls(for: op2).count, 1)
        XCTAssertEqual(try h.quota(t).reserved, 0); XCTAssertEqual(try h.quota(t).used, 0)
    }

    func testLifetimeSweepEndsTargetsAfterEightHours() throws {
        let t = try h.tenant(), inst = try h.installation(t)
        let old = try h.target(t, installation: inst, token: nil)  // token never came: its update waits
        let young = try h.target(t, installation: inst, token: nil)
        let op = try h.update(t, target: old, state: ["v": 1])
        _ = try h.db.system { c in
            try c.execute("UPDATE targets SET started_at = now() - interval '8 hours 1 second' WHERE tenant_id = $1 AND id = $2", [t, old])
        }
        let ended = try h.db.system { c in try DispatchStore.endExpiredLifetimes(c) }
        XCTAssertEqual(ended.map(\.targetId), [old])
        let r = try h.targetRecord(t, old)
        XCTAssertEqual(r.status, .ended); XCTAssertEqual(r.endReason, "system_expired"); XCTAssertNotNil(r.endedAt)
        let o = try h.operation(t, op)
        XCTAssertEqual(o.status, .cancelled); XCTAssertEqual(o.pendingReason, "system_expired")
        XCTAssertEqual(try h.quota(t).reserved, 0)
        XCTAssertEqual(try h.targetRecord(t, young).status, .reserved)
        // The dispatcher runs the sweep by itself too.
        _ = try h.db.system { c in
            try c.execute("UPDATE targets SET started_at = now() - interval '9 hours' WHERE tenant_id = $1 AND id = $2", [t, young])
        }
        h.dispatcher(h.fakeSender())
        try eventually("swept") { try h.targetRecord(t, young).status == .ended }
        XCTAssertEqual(try h.targetRecord(t, young).endReason, "system_expired")
    }
}
