import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import Crypto
import JSON
import LiveRelayTestSupport

/// Operations commands through the real executable (docs/operations.md): a worker's metrics
/// listener (`LIVERELAY_METRICS_LISTEN`), `liverelay doctor` on a healthy deployment and on the
/// mistakes it exists to catch (a superuser role, another KEK).
final class OpsCLITests: CLITestCase {

    var kekBase64: String { Data(env.kek).base64EncodedString() }

    /// `liverelay args…` left running in the repository root (stderr collected as it arrives).
    func background(_ args: [String], env: [String: String]) throws -> BackgroundProcess {
        try BackgroundProcess(self.env.binary, args, environment: env, directory: URL(fileURLWithPath: CLIEnvironment.repoRoot))
    }

    func get(_ url: String) -> (status: Int, body: String) {
        let r = TestHTTP.send("GET", url)
        return (r.status, r.text)
    }

    func testWorkerServesDispatchMetricsHealthAndReadinessOnItsMetricsAddress() throws {
        let worker = try background(
            ["worker"],
            env: [
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "DATABASE_URL": env.conninfo,
                "LIVERELAY_KEK": kekBase64, "LIVERELAY_METRICS_LISTEN": "127.0.0.1:0", "LIVERELAY_LOG_LEVEL": "info"
            ])
        defer { worker.stop() }
        let line = try XCTUnwrap(worker.waitForLine(containing: "metrics listening"), "no metrics listener: \(worker.output)")
        let address = try XCTUnwrap(try JSONValue.parse(line)["address"]?.stringValue)
        XCTAssertTrue(address.hasPrefix("http://127.0.0.1:"), address)

        let metrics = get(address + "/metrics")
        XCTAssertEqual(metrics.status, 200)
        let types = metrics.body.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }
        XCTAssertTrue(types.contains { $0.hasPrefix("# TYPE liverelay_dispatch_") }, "dispatcher metrics: \(types)")
        XCTAssertTrue(types.contains { $0.hasPrefix("# TYPE liverelay_maintenance_") }, "maintenance metrics: \(types)")
        XCTAssertTrue(types.contains { $0.hasPrefix("# TYPE liverelay_db_pool_connections ") }, "pool metrics: \(types)")
        XCTAssertEqual(get(address + "/healthz").status, 200)
        let ready = get(address + "/readyz")
        XCTAssertEqual(ready.status, 200, ready.body)
        XCTAssertEqual(try JSONValue.parse(ready.body)["status"]?.stringValue, "ready")
        XCTAssertEqual(get(address + "/v1/remote-updates/capabilities").status, 404, "the metrics listener serves no API")
    }

    func testWorkerWithoutMetricsAddressOpensNoListenerAndABadAddressIsOneLine() throws {
        let bad = try env.run(
            ["worker"],
            env: [
                "DATABASE_URL": env.conninfo, "LIVERELAY_KEK": kekBase64,
                "LIVERELAY_METRICS_LISTEN": "localhost"
            ])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("LIVERELAY_METRICS_LISTEN must be host:port"), bad.stderr)

        let worker = try background(
            ["worker"],
            env: [
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "DATABASE_URL": env.conninfo,
                "LIVERELAY_KEK": kekBase64, "LIVERELAY_LOG_LEVEL": "info"
            ])
        defer { worker.stop() }
        let running = try XCTUnwrap(worker.waitForLine(containing: "worker running"), worker.output)
        XCTAssertEqual(try JSONValue.parse(running)["metrics"]?.stringValue, "off", running)
        XCTAssertNil(worker.output.split(separator: "\n").first { $0.contains("metrics listening") }, "default: no listener")
    }

    /// A tenant with an APNs key (both environments) and an FCM service account, stored through the API.
    func tenantWithCredentials() throws -> String {
        let w = try env.world()
        let key = P256PrivateKey.generate()
        for e in ["sandbox", "production"] {
            let r = env.call(
                "PUT", "/v1/provider-credentials/apns",
                [
                    "team_id": "ABCDE12345", "key_id": "KEY1234567", "private_key": .string(key.pkcs8PEM),
                    "topics": ["com.example.app"], "environment": .string(e)
                ], as: w.master)
            XCTAssertEqual(r.status, 201, r.json.jsonString)
        }
        let rsa = RSAPrivateKey.generate(bits: 2048)
        let f = env.call(
            "PUT", "/v1/provider-credentials/fcm",
            [
                "service_account": [
                    "type": "service_account", "project_id": "demo-project", "private_key_id": "k1", "private_key": .string(rsa.pkcs8PEM),
                    "client_email": "push@demo-project.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token"
                ]
            ], as: w.master)  // doctor mints the assertion only, no request
        XCTAssertEqual(f.status, 201, f.json.jsonString)
        return w.tenantId
    }

    func lines(_ out: String) -> [String] { out.split(separator: "\n").map(String.init) }

    func testDoctorPassesOnAHealthyDeploymentWithOneLinePerCheck() throws {
        let tenant = try tenantWithCredentials()
        let r = try env.run(["doctor"], env: ["DATABASE_URL": env.conninfo, "LIVERELAY_KEK": kekBase64])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let out = lines(r.stdout)
        for check in [
            "configuration", "database", "database role", "migrations", "clock", "kek",
            "tenant \(tenant) apns production", "tenant \(tenant) apns sandbox", "tenant \(tenant) fcm"
        ] {
            XCTAssertEqual(out.filter { $0.hasPrefix("ok   \(check): ") }.count, 1, "one ok line for \(check) in:\n\(r.stdout)")
        }
        XCTAssertFalse(out.contains { $0.hasPrefix("FAIL") }, r.stdout)
        XCTAssertEqual(out.last, "doctor: 9 ok, 0 warnings, 0 failed", r.stdout)
        XCTAssertFalse(r.stdout.contains("PRIVATE KEY"), "no key material")
        // --tenant narrows the credential checks; an unknown tenant is a failure.
        let unknown = try env.run(["doctor", "--tenant", "ten_nosuch"], env: ["DATABASE_URL": env.conninfo, "LIVERELAY_KEK": kekBase64])
        XCTAssertEqual(unknown.status, 1)
        XCTAssertTrue(unknown.stdout.contains("FAIL tenant ten_nosuch: no such tenant"), unknown.stdout)
        let usage = try env.run(["doctor", "--frobnicate"])
        XCTAssertEqual(usage.status, 2, usage.stderr)
    }

    func testDoctorFailsWithAClearLineWhenTheRoleIsASuperuser() throws {
        guard let admin = ProcessInfo.processInfo.environment["LIVERELAY_TEST_ADMIN_DATABASE_URL"] else {
            return XCTFail("LIVERELAY_TEST_ADMIN_DATABASE_URL is not set (deploy/local/test sets it): the superuser case cannot be checked")
        }
        let superuser = admin + (admin.contains("?") ? "&" : "?") + "dbname=\(env.database.name)"
        let r = try env.run(["doctor"], env: ["DATABASE_URL": superuser, "LIVERELAY_KEK": kekBase64])
        XCTAssertEqual(r.status, 1, r.stdout)
        let line = try XCTUnwrap(lines(r.stdout).first { $0.hasPrefix("FAIL database role: ") }, r.stdout)
        XCTAssertTrue(line.contains("SUPERUSER") && line.contains("row-level security does not apply"), line)
        XCTAssertEqual(lines(r.stdout).filter { $0.hasPrefix("FAIL") }.count, 1, "only the role fails: \(r.stdout)")
    }

    func testDoctorFailsWhenStoredKeysDoNotOpenWithTheKEK() throws {
        let tenant = try tenantWithCredentials()
        let other = Data(SecureRandom.bytes(32)).base64EncodedString()
        let r = try env.run(["doctor"], env: ["DATABASE_URL": env.conninfo, "LIVERELAY_KEK": other])
        XCTAssertEqual(r.status, 1, r.stdout)
        let out = lines(r.stdout)
        XCTAssertTrue(out.contains { $0.hasPrefix("FAIL kek: 3 of 3 stored provider keys do not open") }, r.stdout)
        XCTAssertTrue(out.contains { $0.hasPrefix("FAIL tenant \(tenant) fcm: ") }, r.stdout)
        let config = try env.run(["doctor"], env: ["DATABASE_URL": env.conninfo, "LIVERELAY_KEK": "short"])
        XCTAssertEqual(config.status, 1)
        XCTAssertTrue(config.stdout.hasPrefix("FAIL configuration: LIVERELAY_KEK must be the base64 of exactly 32 random bytes"), config.stdout)
    }

    func testRemoteReportsAnUnknownCommandBeforeAMissingKey() throws {
        let r = try env.run(["remote", "frobnicate"])
        XCTAssertEqual(r.status, 2)
        XCTAssertTrue(r.stderr.hasPrefix("liverelay remote: unknown command \"frobnicate\""), r.stderr)
        XCTAssertFalse(r.stderr.contains("LIVERELAY_KEY"), r.stderr)
        let sub = try env.run(["remote", "target", "frobnicate"])
        XCTAssertTrue(sub.stderr.hasPrefix("liverelay remote: unknown command \"target frobnicate\""), sub.stderr)
        let known = try env.run(["remote", "capabilities"])
        XCTAssertEqual(known.status, 2)
        XCTAssertTrue(known.stderr.contains("LIVERELAY_KEY is not set"), "a known command still needs the key: \(known.stderr)")
    }
}
