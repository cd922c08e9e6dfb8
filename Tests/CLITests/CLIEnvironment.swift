import Foundation
import XCTest
import LiveRelayTestSupport
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// A live LiveRelay API (in process, ephemeral port, built by `APIStack` as `serve` builds it)
/// over a fresh migrated database, and the real `liverelay` binary to run against it. Needs
/// `LIVERELAY_TEST_DATABASE_URL` (set by deploy/local/test) and a built `.build/debug/liverelay`;
/// throws `FixtureFailure` without them.
final class CLIEnvironment: @unchecked Sendable {
    let database: TestDatabase
    let pool: PostgresPool
    let db: Database
    let api: APIStack
    let binary: String
    let kek: [UInt8]
    var conninfo: String { database.conninfo }
    var baseURL: String { api.baseURL }

    static var repoRoot: String { TestDatabase.repoRoot }

    static func make() throws -> CLIEnvironment { try CLIEnvironment(binary: try ChildProcess.liverelayExecutable()) }

    private init(binary: String) throws {
        self.binary = binary
        database = try TestDatabase(prefix: "lr_cli")
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 8, acquireTimeoutSeconds: 5)
        db = Database(pool: pool)
        let log = Logger(minimum: .error, sink: { _ in })
        let kek = SecureRandom.bytes(32)
        self.kek = kek
        let (db, metrics, migrator) = (db, MetricsRegistry(), try TestDatabase.migrator())
        api = try APIStack(
            db: db, conninfo: database.conninfo, log: log, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 4),
            metrics: metrics, serverLog: { _ in }
        ) { auth, events in
            APIContext(db: db, auth: auth, kek: try AESGCM(key: kek), log: log, metrics: metrics, migrator: migrator, events: events)
        }
    }

    func tearDown() {
        api.stop(drainTimeoutSeconds: 5)
        pool.close()
        database.drop()
    }

    typealias Run = ChildProcessResult

    /// Runs `liverelay args…` with `env` on top of a minimal environment, in the repository root.
    func run(_ args: [String], env: [String: String] = [:], stdin: String? = nil) throws -> Run {
        var e: [String: String] = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "LIVERELAY_LOG_LEVEL": "error"]
        for (k, v) in env { e[k] = v }
        return try ChildProcess.run(binary, args, environment: e, directory: URL(fileURLWithPath: Self.repoRoot), stdin: stdin)
    }

    /// `liverelay remote …` as `key` against this server.
    func remote(_ args: [String], key: String, url: String? = nil, stdin: String? = nil) throws -> Run {
        try run(["remote"] + args, env: ["LIVERELAY_KEY": key, "LIVERELAY_URL": url ?? baseURL], stdin: stdin)
    }

    /// `liverelay admin …` straight on this test's database.
    func admin(_ args: [String]) throws -> Run {
        try run(["admin"] + args, env: ["DATABASE_URL": conninfo, "LIVERELAY_KEK": Data(kek).base64EncodedString()])
    }

    struct Reply { let status: Int; let json: JSONValue }

    /// One API request (for setting up what the CLI then reads or writes).
    func call(_ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String) -> Reply {
        let r = TestHTTP.send(method, baseURL + path, body: body.map { $0.serialized() }, credential: credential)
        return Reply(status: r.status, json: (try? JSONValue.parse(r.body)) ?? .null)
    }

    /// A tenant (through `liverelay admin tenants create`), an iOS installation with a ready
    /// start target (through the device API) and a sender key covering it.
    struct World { let tenantId: String; let master: String; let sender: String; let startTarget: String; let templateVersion: String }

    func world(quota: Int = 1000) throws -> World {
        let t = try admin(["tenants", "create", "--name", "CLI", "--daily-push-quota", String(quota)])
        guard t.status == 0, let tenant = t.json["tenant"]?["id"]?.stringValue, let master = t.json["master_key"]?["credential"]?.stringValue,
            let pub = t.json["publishable_key"]?["credential"]?.stringValue
        else {
            throw FixtureFailure("admin tenants create failed: \(t.status) \(t.stderr)")
        }
        let inst = call(
            "POST", "/v1/installations",
            [
                "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                "install_id": .string(UUID().uuidString)
            ], as: pub)
        guard let insId = inst.json["installation_id"]?.stringValue, let insCred = inst.json["credential"]?.stringValue else {
            throw FixtureFailure("installation failed: \(inst.status) \(inst.json.jsonString)")
        }
        let prep = call(
            "POST", "/v1/installations/\(insId)/start-targets",
            [
                "binding_id": "widget", "activity_type": "delivery", "attributes_type": "DeliveryAttributes", "renderer_digest": "sha256:r1",
                "schema": ["type": "object", "required": ["eta"], "properties": ["eta": ["type": "string", "maxLength": 20]]],
                "bundle": ["bytes": 1000, "modules": 1, "files": 1]
            ], as: insCred)
        guard let st = prep.json["start_target_id"]?.stringValue, let tv = prep.json["template_version"]?.stringValue else {
            throw FixtureFailure("prepare failed: \(prep.status) \(prep.json.jsonString)")
        }
        let tok = call("PUT", "/v1/installations/\(insId)/start-targets/\(st)/push-to-start-token", ["token": "a1b2c3d4"], as: insCred)
        guard tok.status == 200 else { throw FixtureFailure("token failed: \(tok.status)") }
        let sk = call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(st)], "created_from": [.string(st)],
                "permissions": ["activities:start", "activities:read-state", "activities:update", "activities:end"],
                "idempotency_key": .string(UUID().uuidString)
            ], as: master)
        guard let sender = sk.json["credential"]?.stringValue else { throw FixtureFailure("sender key failed: \(sk.status)") }
        return World(tenantId: tenant, master: master, sender: sender, startTarget: st, templateVersion: tv)
    }
}

extension ChildProcessResult {
    /// Standard output parsed as one JSON document (`.null` when it is not one).
    var json: JSONValue { (try? JSONValue.parse(stdout)) ?? .null }
}

/// A test class whose every test gets its own `CLIEnvironment` (`env`, made in `setUpWithError`,
/// torn down in `tearDown`).
class CLITestCase: XCTestCase {
    var env: CLIEnvironment!
    override func setUpWithError() throws { env = try CLIEnvironment.make() }
    override func tearDown() { env?.tearDown() }
}
