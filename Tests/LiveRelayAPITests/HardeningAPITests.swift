import Foundation
import XCTest
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Locking
import Logging
import Postgres
@testable import LiveRelayApp
import LiveRelayTestSupport

/// Issue 14 (docs/security.md): installation takeover, the business-key oracle, per-tenant caps,
/// retention, and the small ones (time range, APNs token shape, statement timeout, readyz,
/// request ids, the revoke clock, notification retry), through the real API on real PostgreSQL.
final class HardeningAPITests: XCTestCase {
    var env: TestEnvironment!
    override func tearDown() { env?.tearDown() }

    func text(_ r: TestEnvironment.Reply) -> String { String(decoding: r.raw, as: UTF8.self) }

    // MARK: row 3 — installation takeover by install_id

    func testRegistrationWithAnotherBodyForAnExistingInstallIdChangesNothing() throws {
        env = try TestEnvironment.make()
        let t = try env.tenant()
        let installId = UUID().uuidString.lowercased()
        let body: JSONValue = [
            "platform": "android", "app_id": "com.example.app", "environment": "sandbox",
            "install_id": .string(installId), "fcm_token": "fcm-victim"
        ]
        let victim = env.call("POST", "/v1/installations", body, as: t.publishable)
        XCTAssertEqual(victim.status, 201, text(victim))
        let id = try XCTUnwrap(victim["installation_id"]?.stringValue)
        let credential = try XCTUnwrap(victim["credential"]?.stringValue)
        func row() throws -> (String?, String, Int) {
            try env.db.system { c in
                let r = try c.query("SELECT fcm_token, environment FROM installations WHERE id = $1", [id])[0]
                let live = try c.query(
                    """
                    SELECT count(*) AS n FROM installation_credentials WHERE installation_id = $1 AND expires_at IS NULL
                    """, [id])[0].int("n")
                return (try r.optionalString("fcm_token"), try r.string("environment"), live)
            }
        }

        // The attacker holds the public publishable key and the victim's install_id.
        var attack = body.objectValue!
        attack["fcm_token"] = "fcm-attacker"
        var upper = body.objectValue!
        upper["install_id"] = .string(installId.uppercased())
        var production = body.objectValue!
        production["environment"] = "production"
        for b in [attack, upper, production] {
            let r = env.call("POST", "/v1/installations", .object(b), as: t.publishable)
            XCTAssertEqual(r.status, 409, text(r))
            XCTAssertEqual(r.errorCode, "INSTALLATION_EXISTS")
            XCTAssertEqual(r.json["error"]?["details"]?["field"], "install_id")
            XCTAssertNil(r["credential"])
            XCTAssertFalse(text(r).contains(id), "the installation id is not revealed")
            XCTAssertFalse(text(r).contains("lri_"))
        }
        let (fcm, environment, unexpired) = try row()
        XCTAssertEqual(fcm, "fcm-victim")
        XCTAssertEqual(environment, "sandbox")
        XCTAssertEqual(unexpired, 1, "the victim's credential was not expired")
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/capabilities", as: credential).status, 200)

        // The device retrying a lost response: the very same body replays the same credential.
        let replay = env.call("POST", "/v1/installations", body, as: t.publishable)
        XCTAssertEqual(replay.status, 201, "a replay answers with the original status: " + text(replay))
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay["credential"]?.stringValue, credential)

        // The FCM token changes through the installation's own credential only.
        XCTAssertEqual(env.call("PUT", "/v1/installations/\(id)/fcm-token", ["token": "fcm-rotated"], as: credential).status, 200)
        XCTAssertEqual(try row().0, "fcm-rotated")
        let other = try Fixtures.installation(env, publishable: t.publishable, platform: "android")
        XCTAssertEqual(env.call("PUT", "/v1/installations/\(id)/fcm-token", ["token": "fcm-attacker"], as: other.credential).status, 404)
        XCTAssertEqual(try row().0, "fcm-rotated")
    }

    func testInstallIdIsStoredAndComparedInCanonicalLowercase() throws {
        env = try TestEnvironment.make()
        let t = try env.tenant()
        let installId = UUID().uuidString  // Foundation prints upper case
        let r = env.call(
            "POST", "/v1/installations",
            [
                "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                "install_id": .string(installId)
            ], as: t.publishable)
        XCTAssertEqual(r.status, 201, text(r))
        let stored = try env.db.system { c in
            try c.query("SELECT install_id FROM installations WHERE id = $1", [r["installation_id"]?.stringValue ?? ""])[0].string("install_id")
        }
        XCTAssertEqual(stored, installId.lowercased())
        let lower = env.call(
            "POST", "/v1/installations",
            [
                "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                "install_id": .string(installId.lowercased())
            ], as: t.publishable)
        XCTAssertEqual(lower.errorCode, "INSTALLATION_EXISTS", "the lowercase spelling names the same installation")
    }

    // MARK: idempotency scope across spellings of one path

    func testPercentEncodedPathIsTheSameIdempotencyScope() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        let body = w.startBody(key: "spelling-1")
        let first = env.call("POST", "/v1/remote-updates/live-activities/start", body, as: w.sender.credential)
        XCTAssertEqual(first.status, 202, text(first))
        let target = try XCTUnwrap(first.json["target_id"]?.stringValue ?? first.json["target"]?["id"]?.stringValue, text(first))
        // `%73tart` is `start`: the router sends it to the same handler, so the key's scope is the same.
        let again = env.call("POST", "/v1/remote-updates/live-activities/%73tart", body, as: w.sender.credential)
        XCTAssertEqual(again.status, 202, text(again))
        XCTAssertEqual(again.headers["idempotent-replayed"], "true", "a replay, not a second start: \(text(again))")
        XCTAssertTrue(text(again).contains(target), text(again))
        let other = env.call(
            "POST", "/v1/remote-updates/live-activities/%73tart", w.startBody(["eta": 99], key: "spelling-1"), as: w.sender.credential)
        XCTAssertEqual(other.status, 422, text(other))
        XCTAssertEqual(other.errorCode, "IDEMPOTENCY_KEY_REUSED")
        let starts = try env.db.system { c in
            try c.query("SELECT count(*)::int AS n FROM targets WHERE tenant_id = $1", [w.tenant.id])[0].int("n")
        }
        XCTAssertEqual(starts, 1, "one target, one start push")
    }

    // MARK: row 4 — business-key oracle

    func testBusinessConflictNamesTheHolderOnlyToCallersWhoMayReadIt() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        let business: [String: JSONValue] = ["business_key": "delivery:42", "business_generation": "1"]
        let holder = w.start(extra: business)
        XCTAssertFalse(holder.isEmpty)

        // The key that created it (created_from + creator) may read it: target_id shown.
        let own = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: business), as: w.sender.credential)
        XCTAssertEqual(own.status, 409, text(own))
        XCTAssertEqual(own.errorCode, "BUSINESS_GENERATION_CONFLICT")
        XCTAssertEqual(own.json["error"]?["details"]?["target_id"]?.stringValue, holder)

        // Another sender key that may start on the same start target but does not cover the
        // holder: the conflict, without the holder's id anywhere.
        let prober = try Fixtures.senderKey(env, master: w.tenant.master, targets: [w.startTargetId], permissions: ["activities:start"])
        let probe = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: business), as: prober.credential)
        XCTAssertEqual(probe.status, 409, text(probe))
        XCTAssertEqual(probe.errorCode, "BUSINESS_GENERATION_CONFLICT")
        XCTAssertNil(probe.json["error"]?["details"]?["target_id"])
        XCTAssertFalse(text(probe).contains(holder), "no target id leaks to a caller that cannot read it")

        // Device side: another installation probing the key learns nothing; the owning one does.
        let reservation: JSONValue = [
            "activity_type": "delivery", "business_key": "delivery:42", "business_generation": "1",
            "idempotency_key": .string(UUID().uuidString), "state": ["eta": 1]
        ]
        let stranger = try Fixtures.installation(env, publishable: w.tenant.publishable)
        let theirs = env.call("POST", "/v1/installations/\(stranger.id)/targets", reservation, as: stranger.credential)
        XCTAssertEqual(theirs.status, 409, text(theirs))
        XCTAssertEqual(theirs.errorCode, "BUSINESS_GENERATION_CONFLICT")
        XCTAssertFalse(text(theirs).contains(holder))
        let mine = env.call("POST", "/v1/installations/\(w.installationId)/targets", reservation, as: w.installationCredential)
        XCTAssertEqual(mine.status, 409, text(mine))
        XCTAssertEqual(mine.json["error"]?["details"]?["target_id"]?.stringValue, holder)
    }

    // MARK: row 5 — SSRF through an uploaded service account

    func testServiceAccountTokenURIMustBeGooglesOrOnTheConfiguredFCMOrigin() throws {
        env = try TestEnvironment.make(fcmURL: "https://127.0.0.1:8443")
        let t = try env.tenant()
        let key = RSAPrivateKey.generate()
        func put(_ uri: String) -> TestEnvironment.Reply {
            env.call(
                "PUT", "/v1/provider-credentials/fcm",
                [
                    "service_account": [
                        "type": "service_account", "project_id": "demo-project", "private_key_id": "0123abcd", "private_key": .string(key.pkcs8PEM),
                        "client_email": "push@demo-project.iam.gserviceaccount.com", "token_uri": .string(uri)
                    ]
                ], as: t.master)
        }
        for bad in [
            "https://evil.example/token", "https://oauth2.googleapis.com.evil.example/token", "https://oauth2.googleapis.com:444/token",
            "https://127.0.0.1:8444/token", "http://127.0.0.1:8443/token", "https://user@127.0.0.1:8443/token",
            "https://169.254.169.254/computeMetadata/v1/token"
        ] {
            let r = put(bad)
            XCTAssertEqual(r.status, 400, "\(bad): \(text(r))")
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
            XCTAssertEqual(r.json["error"]?["details"]?["field"], "service_account.token_uri", bad)
        }
        XCTAssertEqual(put("https://oauth2.googleapis.com/token").status, 201)
        XCTAssertEqual(put("https://127.0.0.1:8443/token").status, 200, "the configured FCM origin (the sandbox) is allowed")
        let big = env.call(
            "PUT", "/v1/provider-credentials/fcm",
            [
                "service_account": [
                    "type": "service_account", "project_id": "demo-project", "private_key_id": "0123abcd",
                    "private_key": .string(RSAPrivateKey.generate(bits: 4104).pkcs8PEM),
                    "client_email": "push@demo-project.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token"
                ]
            ], as: t.master)
        XCTAssertEqual(big.json["error"]?["details"]?["field"], "service_account.private_key", "RSA over 4096 bits")
    }

    // MARK: row 7 — per-tenant caps

    func testInstallationAndLiveTargetCapsAreEnforcedAtTheBoundaryAndReported() throws {
        env = try TestEnvironment.make(limits: TenantLimits(maxInstallationsPerTenant: 2, maxLiveTargetsPerTenant: 2))
        let w = try LifecycleWorld.make(env)  // installation 1
        let caps = env.call("GET", "/v1/remote-updates/capabilities", as: w.tenant.master)
        XCTAssertEqual(caps["limits"]?["installations_per_tenant"]?.intValue, 2)
        XCTAssertEqual(caps["limits"]?["live_targets_per_tenant"]?.intValue, 2)
        XCTAssertEqual(caps["limits"]?["retention_days"]?.intValue, 30)

        func register() -> TestEnvironment.Reply {
            env.call(
                "POST", "/v1/installations",
                [
                    "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                    "install_id": .string(UUID().uuidString)
                ], as: w.tenant.publishable)
        }
        let second = register()
        XCTAssertEqual(second.status, 201, text(second))
        let third = register()
        XCTAssertEqual(third.status, 409, text(third))
        XCTAssertEqual(third.errorCode, "INSTALLATION_LIMIT")
        XCTAssertEqual(third.json["error"]?["details"]?["limit"]?.intValue, 2)
        XCTAssertEqual(third.json["error"]?["details"]?["actual"]?.intValue, 2)
        XCTAssertEqual(
            try env.db.system { c in try c.query("SELECT count(*) AS n FROM installations WHERE tenant_id = $1", [w.tenant.id])[0].int("n") }, 2)
        // A retired installation no longer counts.
        let secondId = try XCTUnwrap(second["installation_id"]?.stringValue)
        XCTAssertEqual(
            env.call("POST", "/v1/installations/\(secondId)/disconnect", [:], as: try XCTUnwrap(second["credential"]?.stringValue)).status, 200)
        XCTAssertEqual(register().status, 201)
        // Another tenant has its own count.
        let other = try env.tenant(name: "Other")
        for _ in 0..<2 { XCTAssertEqual(try Fixtures.installation(env, publishable: other.publishable).id.prefix(4), "ins_") }

        let t1 = w.start()
        _ = w.start()
        let over = env.call("POST", "/v1/remote-updates/live-activities/start", w.startBody(), as: w.sender.credential)
        XCTAssertEqual(over.status, 409, text(over))
        XCTAssertEqual(over.errorCode, "TARGET_LIMIT")
        XCTAssertEqual(over.json["error"]?["details"]?["limit"]?.intValue, 2)
        let local = env.call(
            "POST", "/v1/installations/\(w.installationId)/targets",
            [
                "activity_type": "delivery", "business_key": "local:1", "business_generation": "1",
                "idempotency_key": .string(UUID().uuidString), "state": ["eta": 1]
            ], as: w.installationCredential)
        XCTAssertEqual(local.errorCode, "TARGET_LIMIT", text(local))
        // An ended target frees its place.
        _ = try env.db.tenant(w.tenant.id) { c in
            try c.execute(
                "UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = now() WHERE tenant_id = $1 AND id = $2", [w.tenant.id, t1])
        }
        XCTAssertFalse(w.start().isEmpty)
    }

    /// One installation holds at most `TenantLimits.maxStartTargetsPerInstallation` (64) start
    /// targets that are not retired (docs/security.md "Per-tenant caps"): the 64th (binding,
    /// activity type) is prepared, a 65th is `409 TARGET_LIMIT` (resource
    /// `start_targets_per_installation`) and stores nothing, preparing an existing one again still
    /// works, and retiring a binding frees its place.
    func testOneInstallationPreparesAtMostItsCapOfStartTargets() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)  // its installation already prepared one start target
        let cap = TenantLimits.maxStartTargetsPerInstallation
        XCTAssertEqual(cap, 64)
        func prepare(_ binding: String) -> TestEnvironment.Reply {
            env.call(
                "POST", "/v1/installations/\(w.installationId)/start-targets", Fixtures.prepareBody(binding: binding),
                as: w.installationCredential)
        }
        for n in 2...cap { XCTAssertEqual(prepare("cap\(n)").status, 201, "start target \(n)") }
        let over = prepare("cap\(cap + 1)")
        XCTAssertEqual(over.status, 409, text(over))
        XCTAssertEqual(over.errorCode, "TARGET_LIMIT")
        XCTAssertEqual(over.json["error"]?["details"]?["resource"]?.stringValue, "start_targets_per_installation")
        XCTAssertEqual(over.json["error"]?["details"]?["limit"]?.intValue, Int64(cap))
        XCTAssertEqual(over.json["error"]?["details"]?["actual"]?.intValue, Int64(cap))
        let bindings = try env.db.system { c in
            try c.query("SELECT count(*) AS n FROM bindings WHERE tenant_id = $1 AND id = $2", [w.tenant.id, "cap\(cap + 1)"])[0].int("n")
        }
        XCTAssertEqual(bindings, 0, "the refused prepare stored no binding")
        XCTAssertEqual(prepare("cap2").status, 200, "an existing start target is prepared again")
        let retired = env.call("POST", "/v1/installations/\(w.installationId)/bindings/cap2/retire", [:], as: w.installationCredential)
        XCTAssertEqual(retired.status / 100, 2, text(retired))
        XCTAssertEqual(prepare("cap\(cap + 1)").status, 201, "a retired binding's start target frees its place")
    }

    /// One installation holds at most `TenantLimits.maxLiveTargetsPerInstallation` (64) live
    /// targets through local start reservations: the 64th passes, the 65th is `409 TARGET_LIMIT`
    /// (resource `live_targets_per_installation`), an ended one frees its place, and another
    /// installation of the tenant is not affected. One device can no longer fill its tenant's cap.
    func testOneInstallationReservesAtMostItsCapOfLiveTargets() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        let cap = TenantLimits.maxLiveTargetsPerInstallation
        XCTAssertEqual(cap, 64)
        _ = try env.db.tenant(w.tenant.id) { c in
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, status, revision, state, token_status)
                SELECT $1, 'tgt_cap' || g, $2, 'local', 'delivery', 'reserved', 1, '{"eta": 1}'::jsonb, 'pending'
                  FROM generate_series(1, $3) g
                """, [w.tenant.id, w.installationId, cap - 1])
        }
        func reserve(_ n: Int, installation: String? = nil, credential: String? = nil) -> TestEnvironment.Reply {
            env.call(
                "POST", "/v1/installations/\(installation ?? w.installationId)/targets",
                [
                    "activity_type": "delivery", "business_key": .string("cap:\(n)"), "business_generation": "1",
                    "idempotency_key": .string(UUID().uuidString), "state": ["eta": 1]
                ], as: credential ?? w.installationCredential)
        }
        XCTAssertEqual(reserve(cap).status, 201, "the 64th live target")
        let over = reserve(cap + 1)
        XCTAssertEqual(over.status, 409, text(over))
        XCTAssertEqual(over.errorCode, "TARGET_LIMIT")
        XCTAssertEqual(over.json["error"]?["details"]?["resource"]?.stringValue, "live_targets_per_installation")
        XCTAssertEqual(over.json["error"]?["details"]?["limit"]?.intValue, Int64(cap))
        XCTAssertEqual(over.json["error"]?["details"]?["actual"]?.intValue, Int64(cap))
        _ = try env.db.tenant(w.tenant.id) { c in
            try c.execute(
                "UPDATE targets SET status = 'ended', end_reason = 'device', ended_at = now() WHERE tenant_id = $1 AND id = 'tgt_cap1'", [w.tenant.id]
            )
        }
        XCTAssertEqual(reserve(cap + 2).status, 201, "an ended target frees its place")
        let other = try Fixtures.installation(env, publishable: w.tenant.publishable)
        XCTAssertEqual(reserve(cap + 3, installation: other.id, credential: other.credential).status, 201, "another installation has its own count")
    }

    // MARK: row 7 — retention

    func testRetentionPurgesTerminalTargetsAndTheirOperationsAfterTheRetentionDays() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        let old = w.start(), recent = w.start(), live = w.start()
        try env.db.tenant(w.tenant.id) { c in
            for (id, age) in [(old, "30 days 1 minute"), (recent, "29 days 23 hours")] {
                try c.execute(
                    """
                    UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = now() - $3::interval
                     WHERE tenant_id = $1 AND id = $2
                    """, [w.tenant.id, id, age])
            }
            // A write key older than the retention (plus a day), and a fresh one.
            try c.execute(
                """
                INSERT INTO idempotency_records (tenant_id, endpoint, key, request_hash, status_code, created_at, expires_at)
                VALUES ($1, 'POST /x', 'old', 'h', 202, now() - interval '31 days 1 minute', now() + interval '9 years'),
                       ($1, 'POST /x', 'new', 'h', 202, now() - interval '30 days', now() + interval '9 years')
                """, [w.tenant.id])
        }
        func count(_ sql: String, _ id: String) throws -> Int {
            try env.db.system { c in try c.query(sql, [id])[0].int("n") }
        }
        XCTAssertEqual(try count("SELECT count(*) AS n FROM operations WHERE target_id = $1", old), 1)

        let lines = LineCapture()
        let svc = MaintenanceService(db: env.db, log: Logger(minimum: .info, sink: { lines.append($0) }), interval: 3600, retentionDays: 30)
        let purged = try XCTUnwrap(svc.purgeRetention())
        XCTAssertEqual(purged.targets, 1)
        XCTAssertEqual(purged.operations, 1)
        XCTAssertGreaterThanOrEqual(purged.idempotencyRecords, 1)
        XCTAssertEqual(try count("SELECT count(*) AS n FROM targets WHERE id = $1", old), 0)
        XCTAssertEqual(try count("SELECT count(*) AS n FROM operations WHERE target_id = $1", old), 0)
        XCTAssertEqual(try count("SELECT count(*) AS n FROM targets WHERE id = $1", recent), 1, "29 days 23 hours: kept")
        XCTAssertEqual(try count("SELECT count(*) AS n FROM operations WHERE target_id = $1", recent), 1)
        XCTAssertEqual(try count("SELECT count(*) AS n FROM targets WHERE id = $1", live), 1, "live targets are never purged")
        XCTAssertEqual(try count("SELECT count(*) AS n FROM idempotency_records WHERE key = $1", "old"), 0)
        XCTAssertEqual(try count("SELECT count(*) AS n FROM idempotency_records WHERE key = $1", "new"), 1)
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(old)", as: w.sender.credential).status, 404)
        XCTAssertTrue(lines.text.contains("retention purge"), lines.text)
        XCTAssertEqual(try XCTUnwrap(svc.purgeRetention()), PurgeCounts(), "a second pass finds nothing")
    }

    // MARK: row 8 — small ones

    func testTimesOutsideNineteenSeventyToNineNineNineNineAreRefusedNamingTheField() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        for (field, value) in [
            ("expires_at", "9999-12-31T23:30:00-01:00"), ("stale_at", "9999-12-31T23:59:59.999-00:01"),
            ("expires_at", "0000-01-01T00:00:00Z")
        ] {
            let r = env.call(
                "POST", "/v1/remote-updates/live-activities/start", w.startBody(extra: [field: .string(value)]),
                as: w.sender.credential)
            XCTAssertEqual(r.status, 400, "\(field)=\(value): \(text(r))")
            XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field, value)
        }
        let key = env.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": .array([.string(w.startTargetId)]), "permissions": ["activities:start"],
                "expires_at": "9999-12-31T23:00:00-02:00", "idempotency_key": .string(UUID().uuidString)
            ], as: w.tenant.master)
        XCTAssertEqual(key.status, 400, text(key))
        XCTAssertEqual(key.json["error"]?["details"]?["field"], "expires_at")
        // The last accepted instant.
        let edge = env.call(
            "POST", "/v1/remote-updates/live-activities/start",
            w.startBody(extra: ["expires_at": "9999-12-31T23:59:59.999Z"]), as: w.sender.credential)
        XCTAssertEqual(edge.status, 202, text(edge))
    }

    func testAPNsTokensMustBeEvenLengthHexAtRegistration() throws {
        env = try TestEnvironment.make()
        let w = try LifecycleWorld.make(env)
        let target = w.start()
        let path = "/v1/installations/\(w.installationId)/targets/\(target)/push-token"
        for bad in ["abc", "zz", "0g", "ab cd", "ab:cd", String(repeating: "ab", count: 257)] {
            let r = env.call("PUT", path, ["token": .string(bad)], as: w.installationCredential)
            XCTAssertEqual(r.status, 400, "\(bad): \(text(r))")
            XCTAssertEqual(r.json["error"]?["details"]?["field"], "token", bad)
        }
        XCTAssertEqual(env.call("PUT", path, ["token": .string(String(repeating: "aB", count: 256))], as: w.installationCredential).status, 200)

        let inst = try Fixtures.installation(env, publishable: w.tenant.publishable)
        let (st, _) = try Fixtures.prepared(env, inst, Fixtures.prepareBody())
        let ptt = "/v1/installations/\(inst.id)/start-targets/\(st)/push-to-start-token"
        for bad in ["abc", "a~b_", "xyzw"] {
            let r = env.call("PUT", ptt, ["token": .string(bad)], as: inst.credential)
            XCTAssertEqual(r.status, 400, "\(bad): \(text(r))")
            XCTAssertEqual(r.json["error"]?["details"]?["field"], "token", bad)
        }
        XCTAssertEqual(env.call("PUT", ptt, ["token": "80F1c2d3"], as: inst.credential).status, 200)
    }

    func testEveryTransactionCarriesAStatementTimeout() throws {
        env = try TestEnvironment.make()
        let t = try env.tenant()
        XCTAssertEqual(try env.db.tenant(t.id) { c in try c.query("SHOW statement_timeout")[0].string("statement_timeout") }, "30s")
        XCTAssertEqual(try env.db.system { c in try c.query("SHOW statement_timeout")[0].string("statement_timeout") }, "30s")
        XCTAssertThrowsError(
            try env.db.system { c in
                try c.execute("SET LOCAL statement_timeout = '50ms'")
                _ = try c.query("SELECT pg_sleep(1)::text AS slept")
            }
        ) { e in
            XCTAssertEqual((e as? PostgresError)?.sqlState, "57014", "\(e)")
        }
    }

    func testReadyzSaysWhatIsWrongWithoutInternals() throws {
        env = try TestEnvironment.make()
        XCTAssertEqual(env.call("GET", "/readyz").status, 200)
        _ = try env.db.system { c in try c.execute("UPDATE schema_migrations SET sha256 = 'tampered' WHERE name LIKE '0001%'") }
        // The answer is reused for a second (Readiness.Cache), then checked again.
        XCTAssertEqual(env.call("GET", "/readyz").status, 200, "the cached answer, within its second")
        var r = env.call("GET", "/readyz")
        eventually("readyz checks again after its second", within: 5) {
            r = env.call("GET", "/readyz")
            return r.status == 503
        }
        XCTAssertEqual(r.status, 503)
        XCTAssertEqual(r["reason"]?.stringValue, "an applied migration differs from this build's migration files")
        XCTAssertFalse(text(r).contains("0001"), text(r))
        XCTAssertFalse(text(r).contains(".sql"), text(r))
    }

    /// `/readyz` needs no credential: its answer is reused for `ttlSeconds`, and concurrent
    /// callers of an expired answer share one check.
    func testReadinessCacheReusesItsAnswerAndChecksOnceAtATime() {
        let now = Locked(Date(timeIntervalSince1970: 1_000))
        let cache = Readiness.Cache(ttlSeconds: 1, clock: { now.withLock { $0 } })
        let checks = Locked(0)
        let check: @Sendable () -> HTTPResponse = {
            checks.withLock { $0 += 1 }
            Thread.sleep(forTimeInterval: 0.05)
            return .json(200, ["status": "ready"])
        }
        XCTAssertEqual(cache.response(check).status, 200)
        now.withLock { $0 += 0.999 }
        XCTAssertEqual(cache.response(check).status, 200)
        XCTAssertEqual(checks.withLock { $0 }, 1, "reused within its second")
        now.withLock { $0 += 0.002 }
        DispatchQueue.concurrentPerform(iterations: 8) { _ in XCTAssertEqual(cache.response(check).status, 200) }
        XCTAssertEqual(checks.withLock { $0 }, 2, "eight callers of an expired answer, one check")
    }

    func testClientRequestIdsAreSanitisedBeforeReachingTheAuditLog() throws {
        env = try TestEnvironment.make()
        let t = try env.tenant()
        let ok = String(repeating: "a", count: 128)
        for (sent, kept) in [
            ("evil\"id<script>", false), (String(repeating: "a", count: 129), false), ("a b", false),
            (ok, true)
        ] {
            let r = env.call(
                "POST", "/v1/master-keys", ["label": "k", "idempotency_key": .string(UUID().uuidString)], as: t.master,
                headers: ["X-Request-Id": sent])
            XCTAssertEqual(r.status, 201, text(r))
            let echoed = try XCTUnwrap(r.headers["x-request-id"])
            XCTAssertEqual(echoed == sent, kept, sent)
            if !kept { XCTAssertTrue(echoed.hasPrefix("req_"), echoed) }
            let ids = (env.call("GET", "/v1/audit-events?limit=200", as: t.master)["data"]?.arrayValue ?? []).compactMap {
                $0["request_id"]?.stringValue
            }
            XCTAssertTrue(ids.contains(echoed), sent)
            if !kept { XCTAssertFalse(ids.contains(sent), sent) }
        }
    }

    func testRevokeNowUsesTheDatabaseClockEvenWhenTheNodeClockRunsAhead() throws {
        env = try TestEnvironment.make(now: { Date().addingTimeInterval(3600) })  // this node is an hour fast
        let t = try env.tenant()
        let spare = env.call("POST", "/v1/master-keys", ["label": "spare", "idempotency_key": .string(UUID().uuidString)], as: t.master)
        let id = try XCTUnwrap(spare["id"]?.stringValue), credential = try XCTUnwrap(spare["credential"]?.stringValue)
        XCTAssertEqual(env.call("GET", "/v1/master-keys", as: credential).status, 200)
        let revoked = env.call("POST", "/v1/master-keys/\(id)/revoke", [:], as: t.master)
        XCTAssertEqual(revoked.status, 200, text(revoked))
        let left = try env.db.system { c in
            try c.query("SELECT extract(epoch FROM expires_at - now())::float8 AS s FROM master_keys WHERE id = $1", [id])[0].double("s")
        }
        XCTAssertLessThanOrEqual(left, 1, "expires now by the database's clock, not in an hour")
        eventually("the revoked master key stops working", within: 3) { env.call("GET", "/v1/master-keys", as: credential).status == 401 }
    }

    func testAFailedPostCommitNotificationBatchIsRetriedOnAFreshSession() throws {
        env = try TestEnvironment.make()
        let listener = try PostgresConnection(env.conninfo)
        defer { listener.close() }
        try listener.listen("lr_hardening_probe")
        env.db.sendNotifications([("lr_hardening_probe", "first")])
        XCTAssertEqual(try listener.waitForNotifications(timeoutSeconds: 5).map(\.payload), ["first"])
        // The server drops the notifier's session (restart, idle timeout, admin).
        let admin = try PostgresConnection(env.database.adminConninfo)
        defer { admin.close() }
        let killed = try admin.query(
            """
            SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid() AND query LIKE 'SELECT pg_notify(%'
            """, [env.database.name])
        // The notifier's session idles out after 1 s without work, so it may already be gone.
        XCTAssertLessThanOrEqual(killed.count, 1, "at most the notifier session was terminated")
        Thread.sleep(forTimeInterval: 0.2)
        env.db.sendNotifications([("lr_hardening_probe", "second")])  // retried on a new session if the old one died
        XCTAssertEqual(try listener.waitForNotifications(timeoutSeconds: 5).map(\.payload), ["second"])
    }
}
