import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md push-to-start tokens, binding retire and render reports.
final class DeviceTokenTests: XCTestCase {
    /// A fresh API with one tenant and two of its installations (the second proves isolation).
    private func tenantWithTwoInstallations() throws -> (TestEnvironment, TestEnvironment.Tenant, Fixtures.Installation, Fixtures.Installation) {
        let env = try TestEnvironment.make()
        do {
            let t = try env.tenant()
            return (env, t, try Fixtures.installation(env, publishable: t.publishable), try Fixtures.installation(env, publishable: t.publishable))
        } catch {
            env.tearDown()
            throw error
        }
    }

    func testPushToStartTokenMakesReadyAndIsNeverEchoedOrLogged() throws {
        let (env, t, inst, other) = try tenantWithTwoInstallations()
        defer { env.tearDown() }
        let (st, tv) = try Fixtures.prepared(env, inst, Fixtures.prepareBody())
        let (otherSt, _) = try Fixtures.prepared(env, other, Fixtures.prepareBody())
        let token = "80f1c2d3e4" + (0..<27).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let path = "/v1/installations/\(inst.id)/start-targets/\(st)/push-to-start-token"

        let r = env.call("PUT", path, ["token": .string(token)], as: inst.credential)
        XCTAssertEqual(r.status, 200, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["status"], "ready")
        XCTAssertEqual(r["push_to_start_token_registered"], .bool(true))
        XCTAssertTrue(r["push_to_start_token_fingerprint"]?.stringValue?.hasPrefix("sha256:") ?? false)
        XCTAssertFalse(String(decoding: r.raw, as: UTF8.self).contains(token))
        XCTAssertEqual(try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: st)?.pushToStartToken }, token)

        // A new template version keeps the token (per activity type on iOS): still ready.
        let next = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:r2"))
        XCTAssertEqual(next.status, 200)
        XCTAssertEqual(next["status"], "ready")
        XCTAssertNotEqual(next["template_version"]?.stringValue, tv)
        // Re-preparing and a rotated token.
        let rotated = "aa" + token.dropFirst(2)
        XCTAssertEqual(env.call("PUT", path, ["token": .string(rotated)], as: inst.credential).status, 200)
        XCTAssertEqual(try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: st)?.pushToStartToken }, rotated)

        // Shape errors.
        XCTAssertEqual(env.call("PUT", path, ["token": ""], as: inst.credential).json["error"]?["details"]?["field"], "token")
        XCTAssertEqual(env.call("PUT", path, ["token": "a b/c"], as: inst.credential).json["error"]?["details"]?["field"], "token")
        XCTAssertEqual(env.call("PUT", path, ["token": "abcd", "extra": 1], as: inst.credential).json["error"]?["details"]?["field"], "extra")
        XCTAssertEqual(env.call("PUT", path, [:], as: inst.credential).json["error"]?["details"]?["field"], "token")

        // Another installation's start target, through either path: 404; unknown: 404.
        XCTAssertEqual(
            env.call(
                "PUT", "/v1/installations/\(inst.id)/start-targets/\(otherSt)/push-to-start-token",
                ["token": "abcd"], as: inst.credential
            ).status, 404)
        XCTAssertEqual(
            env.call(
                "PUT", "/v1/installations/\(other.id)/start-targets/\(otherSt)/push-to-start-token",
                ["token": "abcd"], as: inst.credential
            ).status, 404)
        XCTAssertEqual(
            env.call(
                "PUT", "/v1/installations/\(inst.id)/start-targets/st_nope/push-to-start-token",
                ["token": "abcd"], as: inst.credential
            ).status, 404)
        XCTAssertEqual(try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: otherSt)?.status }, "pending")

        // A disconnected installation: 410.
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/disconnect", [:], as: inst.credential).status, 200)
        let late = env.call("PUT", path, ["token": .string(token)], as: inst.credential)
        XCTAssertEqual(late.status, 410)
        XCTAssertEqual(late.errorCode, "INSTALLATION_RETIRED")

        let logs = env.logText
        XCTAssertTrue(logs.contains("push-to-start token registered"))
        XCTAssertFalse(logs.contains(token))
        XCTAssertFalse(logs.contains(rotated))
    }

    func testBindingRetire() throws {
        let (env, t, inst, other) = try tenantWithTwoInstallations()
        defer { env.tearDown() }
        let (st1, tv1) = try Fixtures.prepared(env, inst, Fixtures.prepareBody())
        let (st2, _) = try Fixtures.prepared(env, inst, Fixtures.prepareBody(activityType: "pickup"))
        let (keep, _) = try Fixtures.prepared(env, inst, Fixtures.prepareBody(binding: "other-widget"))
        let path = "/v1/installations/\(inst.id)/bindings/widget/retire"

        XCTAssertEqual(env.call("POST", path, [:], as: other.credential).status, 404)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(other.id)/bindings/widget/retire", [:], as: other.credential).status, 404)
        let r = env.call("POST", path, as: inst.credential)
        XCTAssertEqual(r.status, 200, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["status"], "retired")
        XCTAssertEqual(r["start_target_ids"], .array([.string(min(st1, st2)), .string(max(st1, st2))]))
        XCTAssertNotEqual(r["retired_at"], .null)
        let again = env.call("POST", path, ["idempotency_key": "x"], as: inst.credential)
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(again["retired_at"], r["retired_at"])
        XCTAssertEqual(env.call("POST", path, ["bogus": 1], as: inst.credential).status, 400)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/bindings/nope/retire", [:], as: inst.credential).status, 404)

        let statuses = try env.db.tenant(t.id) { c in
            try [st1, st2, keep].map { try StartTargetStore.get(c, tenantId: t.id, id: $0)?.status }
        }
        XCTAssertEqual(statuses, ["retired", "retired", "pending"])
        // The current version's retention clock started.
        let released = try env.db.tenant(t.id) { c in try TemplateStore.get(c, tenantId: t.id, installationId: inst.id, id: tv1)?.releasedAt }
        XCTAssertNotNil(released)

        // A retired binding does not come back; its start targets take no tokens.
        let revive = Fixtures.prepare(env, inst, Fixtures.prepareBody())
        XCTAssertEqual(revive.status, 409)
        XCTAssertEqual(revive.errorCode, "BINDING_RETIRED")
        XCTAssertEqual(revive.json["error"]?["details"]?["field"], "binding_id")
        let tok = env.call("PUT", "/v1/installations/\(inst.id)/start-targets/\(st1)/push-to-start-token", ["token": "abcd"], as: inst.credential)
        XCTAssertEqual(tok.status, 409)
        XCTAssertEqual(tok.errorCode, "START_TARGET_RETIRED")

        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/disconnect", [:], as: inst.credential).status, 200)
        XCTAssertEqual(env.call("POST", path, [:], as: inst.credential).status, 410)
    }

    func testRenderReportsAndStaleFlag() throws {
        let (env, t, inst, other) = try tenantWithTwoInstallations()
        defer { env.tearDown() }
        let (st, tv) = try Fixtures.prepared(env, inst, Fixtures.prepareBody())
        let tgt = try Fixtures.liveTarget(env, tenant: t.id, installation: inst.id, templateVersion: tv, startTarget: st, revision: 3)
        let path = "/v1/installations/\(inst.id)/targets/\(tgt)/render-reports"
        func report(_ rev: Int64, _ code: JSONValue = "rendered", extra: [String: JSONValue] = [:]) -> TestEnvironment.Reply {
            var o: [String: JSONValue] = ["revision": .int(rev), "template_version": .string(tv), "stage_code": code]
            for (k, v) in extra { o[k] = v }
            return env.call("POST", path, .object(o), as: inst.credential)
        }
        func stored() throws -> JSONValue? {
            try env.db.tenant(t.id) { c in
                try TemplateStore.renderReportTarget(c, tenantId: t.id, installationId: inst.id, targetId: tgt)?.lastRenderReport
            }
        }

        let fresh = report(3)
        XCTAssertEqual(fresh.status, 200, String(decoding: fresh.raw, as: UTF8.self))
        XCTAssertEqual(fresh["stored"], .bool(true))
        XCTAssertEqual(fresh["last_render_report"]?["stale"], .bool(false))
        XCTAssertEqual(fresh["last_render_report"]?["revision"], .int(3))
        XCTAssertEqual(fresh["last_render_report"]?["stage_code"], "rendered")
        XCTAssertNotNil(fresh["last_render_report"]?["received_at"]?.stringValue)
        XCTAssertEqual(try stored()?["revision"], .int(3))

        // The target moves on: the stored report is about an older revision → stale.
        _ = try env.db.tenant(t.id) { c in try c.execute("UPDATE targets SET revision = 5 WHERE tenant_id = $1 AND id = $2", [t.id, tgt]) }
        let old = report(4, .int(2))
        XCTAssertEqual(old["stored"], .bool(true))
        XCTAssertEqual(old["last_render_report"]?["stale"], .bool(true))
        XCTAssertEqual(old["last_render_report"]?["stage_code"], .int(2))
        XCTAssertEqual(try stored()?["revision"], .int(4))
        XCTAssertEqual(report(5)["last_render_report"]?["stale"], .bool(false))
        // A late report about an older revision never hides the newer one.
        let late = report(2, "failed")
        XCTAssertEqual(late.status, 200)
        XCTAssertEqual(late["stored"], .bool(false))
        XCTAssertEqual(late["report"]?["stale"], .bool(true))
        XCTAssertEqual(late["last_render_report"]?["revision"], .int(5))
        XCTAssertEqual(try stored()?["revision"], .int(5))

        // No business state; a revision from the future; shape errors.
        XCTAssertEqual(report(5, extra: ["state": ["eta": "12:00"]]).json["error"]?["details"]?["field"], "state")
        let future = report(6)
        XCTAssertEqual(future.status, 400)
        XCTAssertEqual(future.json["error"]?["details"]?["field"], "revision")
        XCTAssertEqual(future.json["error"]?["details"]?["current_revision"], .int(5))
        XCTAssertEqual(report(0).json["error"]?["details"]?["field"], "revision")
        XCTAssertEqual(report(5, "").json["error"]?["details"]?["field"], "stage_code")
        XCTAssertEqual(
            env.call("POST", path, ["revision": 5, "stage_code": "x"], as: inst.credential).json["error"]?["details"]?["field"], "template_version")
        XCTAssertFalse(try XCTUnwrap(stored()).jsonString.contains("eta"))

        // Another installation: 404; a disconnected one: 410.
        XCTAssertEqual(env.call("POST", path, ["revision": 1, "template_version": .string(tv), "stage_code": "x"], as: other.credential).status, 404)
        XCTAssertEqual(
            env.call(
                "POST", "/v1/installations/\(other.id)/targets/\(tgt)/render-reports",
                ["revision": 1, "template_version": .string(tv), "stage_code": "x"], as: other.credential
            ).status, 404)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/disconnect", [:], as: inst.credential).status, 200)
        XCTAssertEqual(report(5).status, 410)
    }
}
