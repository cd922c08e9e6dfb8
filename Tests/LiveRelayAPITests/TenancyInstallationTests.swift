import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// docs/endpoints.md device endpoints: registration (publishable key, idempotent on install_id),
/// credential renewal (old credential valid 5 more minutes), disconnect.
final class TenancyInstallationTests: TenancyTestCase {
    func works(_ credential: String) -> Bool { call("GET", "/v1/remote-updates/capabilities", as: credential).status == 200 }

    /// Seconds from now until credential `id` stops working (nil = no expiry).
    func secondsLeft(_ credential: String) throws -> Double? {
        let id = try XCTUnwrap(CredentialToken.parse(credential)?.id)
        return try env.db.system { c in
            try c.query("SELECT extract(epoch FROM expires_at - now())::float8 AS s FROM installation_credentials WHERE id = $1", [id])[0]
                .optionalDouble("s")
        }
    }

    func testRegistrationRenewalAndDisconnect() throws {
        let t = try tenant()
        let installId = UUID().uuidString
        let body: JSONValue = ["platform": "ios", "app_id": "com.example.app", "environment": "sandbox", "install_id": .string(installId)]

        // Register; the same request again replays the same credential.
        let first = call("POST", "/v1/installations", body, as: t.publishable)
        XCTAssertEqual(first.status, 201, first.text)
        let installation = try XCTUnwrap(first["installation_id"]?.stringValue)
        let c1 = try XCTUnwrap(first["credential"]?.stringValue)
        XCTAssertTrue(installation.hasPrefix("ins_"))
        XCTAssertTrue(c1.hasPrefix("lri_"))
        let runsBefore = env.api.auth.argon2Limiter.totalRuns
        let replay = call("POST", "/v1/installations", body, as: t.publishable)
        XCTAssertEqual(env.api.auth.argon2Limiter.totalRuns, runsBefore, "a replay answers before any argon2 run")
        XCTAssertEqual(replay.status, 201, "a replayed creation answers 201 again: \(replay.text)")
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay["credential"]?.stringValue, c1)
        XCTAssertEqual(replay.raw, first.raw)
        XCTAssertTrue(works(c1))

        // Another request for the same install_id: 409 INSTALLATION_EXISTS, nothing changed and
        // no credential (anyone holding the public publishable key could send it).
        var changed = body.objectValue!
        changed["environment"] = "production"
        let takenRunsBefore = env.api.auth.argon2Limiter.totalRuns
        let taken = call("POST", "/v1/installations", .object(changed), as: t.publishable)
        XCTAssertEqual(env.api.auth.argon2Limiter.totalRuns, takenRunsBefore, "a taken install_id answers before any argon2 run")
        XCTAssertEqual(taken.status, 409, taken.text)
        XCTAssertEqual(taken.errorCode, "INSTALLATION_EXISTS")
        XCTAssertNil(taken["credential"])
        XCTAssertNil(try secondsLeft(c1), "the installation's own credential keeps working, unexpired")
        XCTAssertEqual(
            try env.db.system { c in try c.query("SELECT environment FROM installations WHERE id = $1", [installation])[0].string("environment") },
            "sandbox", "nothing changed")

        // The installation renews with its own credential: the old one valid 5 more minutes.
        let first2 = call("POST", "/v1/installations/\(installation)/credential/renew", [:], as: c1)
        XCTAssertEqual(first2.status, 201, first2.text)
        let c2 = try XCTUnwrap(first2["credential"]?.stringValue)
        XCTAssertNotEqual(c2, c1)
        XCTAssertTrue(works(c2))
        XCTAssertTrue(works(c1), "the previous credential works during its grace period")
        let left1 = try XCTUnwrap(try secondsLeft(c1))
        XCTAssertGreaterThan(left1, 290)
        XCTAssertLessThanOrEqual(left1, 300)
        XCTAssertNil(try secondsLeft(c2))

        // Renew: new credential works, the old one too (within its grace period).
        let renewed = call("POST", "/v1/installations/\(installation)/credential/renew", [:], as: c2)
        XCTAssertEqual(renewed.status, 201, renewed.text)
        XCTAssertEqual(renewed["installation_id"]?.stringValue, installation)
        let c3 = try XCTUnwrap(renewed["credential"]?.stringValue)
        XCTAssertNotEqual(c3, c2)
        XCTAssertTrue(works(c3))
        XCTAssertTrue(works(c2))
        let left2 = try XCTUnwrap(try secondsLeft(c2))
        XCTAssertGreaterThan(left2, 290)
        XCTAssertLessThanOrEqual(left2, 300)
        XCTAssertLessThanOrEqual(try XCTUnwrap(try secondsLeft(c1)), left1, "a renewal never extends an older grace period")
        XCTAssertEqual(call("PUT", "/v1/installations/\(installation)/fcm-token", ["token": "fcm-1"], as: c3).status, 200)

        // Disconnect: the installation is retired; its credentials still authenticate, but
        // renew and fcm-token answer 410 (also through credentials verified before).
        let disconnected = call("POST", "/v1/installations/\(installation)/disconnect", [:], as: c3)
        XCTAssertEqual(disconnected.status, 200, disconnected.text)
        XCTAssertEqual(disconnected["status"]?.stringValue, "retired")
        XCTAssertNotNil(disconnected["retired_at"]?.stringValue)
        XCTAssertEqual(
            try env.db.system { c in try c.query("SELECT status FROM installations WHERE id = $1", [installation])[0].string("status") },
            "retired")
        XCTAssertTrue(works(c3), "a retired installation's credential still authenticates")
        for cred in [c3, c2] {
            let renew = call("POST", "/v1/installations/\(installation)/credential/renew", [:], as: cred)
            XCTAssertEqual(renew.status, 410, renew.text)
            XCTAssertEqual(renew.errorCode, "INSTALLATION_RETIRED")
            let fcm = call("PUT", "/v1/installations/\(installation)/fcm-token", ["token": "fcm-2"], as: cred)
            XCTAssertEqual(fcm.status, 410, fcm.text)
            XCTAssertEqual(fcm.errorCode, "INSTALLATION_RETIRED")
        }
        XCTAssertEqual(call("POST", "/v1/installations/\(installation)/disconnect", [:], as: c3).status, 200, "disconnect is idempotent")

        // Registering the same install_id again (even with the very first request's body)
        // makes a NEW installation: a late request cannot attach to the retired connection.
        for b in [body] {
            let again = call("POST", "/v1/installations", b, as: t.publishable)
            XCTAssertEqual(again.status, 201, again.text)
            XCTAssertNil(again.headers["idempotent-replayed"], "no replay of the retired installation's registration")
            let newId = try XCTUnwrap(again["installation_id"]?.stringValue)
            XCTAssertNotEqual(newId, installation)
            XCTAssertEqual(again["status"]?.stringValue, "active")
            let cred = try XCTUnwrap(again["credential"]?.stringValue)
            XCTAssertEqual(call("POST", "/v1/installations/\(newId)/credential/renew", [:], as: cred).status, 201)
        }
        XCTAssertEqual(
            call("POST", "/v1/installations", .object(changed), as: t.publishable).errorCode, "INSTALLATION_EXISTS",
            "the new installation is not taken over either")
        let active = try env.db.system { c in
            try c.query("SELECT id FROM installations WHERE lower(install_id) = lower($1) AND status = 'active'", [installId]).map {
                try $0.string("id")
            }
        }
        XCTAssertEqual(active.count, 1)
    }

    func testPublishableKeyIsBoundToItsAppAndPlatform() throws {
        let t = try tenant()
        let made = call("POST", "/v1/publishable-keys", ["app_id": "com.example.x", "platform": "ios"], as: t.master)
        XCTAssertEqual(made.status, 201, made.text)
        let pk = try XCTUnwrap(made["credential"]?.stringValue)
        func register(_ app: String, _ platform: String) -> TestEnvironment.Reply {
            call(
                "POST", "/v1/installations",
                [
                    "platform": .string(platform), "app_id": .string(app), "environment": "sandbox",
                    "install_id": .string(UUID().uuidString)
                ], as: pk)
        }
        let wrongApp = register("com.example.y", "ios")
        XCTAssertEqual(wrongApp.status, 403, wrongApp.text)
        XCTAssertEqual(wrongApp.errorCode, "PERMISSION_DENIED")
        XCTAssertEqual(register("com.example.x", "android").status, 403)
        XCTAssertEqual(register("com.example.x", "ios").status, 201)
        XCTAssertEqual(
            try env.db.system { c in
                try c.query("SELECT count(*)::int AS n FROM installations WHERE tenant_id = $1", [t.id])[0].int("n")
            }, 1)

        // A revoked publishable key stops registering.
        let id = try XCTUnwrap(made["id"]?.stringValue)
        XCTAssertEqual(call("POST", "/v1/publishable-keys/\(id)/revoke", [:], as: t.master).status, 200)
        eventually("the revoked publishable key stops registering", within: 1) {
            self.env.call(
                "POST", "/v1/installations",
                [
                    "platform": "ios", "app_id": "com.example.x", "environment": "sandbox", "install_id": .string(UUID().uuidString)
                ], as: pk
            ).status == 401
        }
    }
}
