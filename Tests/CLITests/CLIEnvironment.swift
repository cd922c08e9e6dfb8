import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Synchronization

/// A live LiveRelay API (in process, ephemeral port) over a fresh migrated database, and the
/// real `liverelay` binary to run against it. Needs `LIVERELAY_TEST_DATABASE_URL` (set by
/// deploy/local/test) and a built `.build/debug/liverelay`; tests skip without them.
final class CLIEnvironment: @unchecked Sendable {
    let dbName: String
    let conninfo: String
    let adminConninfo: String
    let pool: PostgresPool
    let db: Database
    let server: HTTPServer
    let auth: Authenticator
    let events: EventWaiter
    let baseURL: String
    let binary: String
    let kek: [UInt8]

    static var repoRoot: String {
        ProcessInfo.processInfo.environment["LIVERELAY_TEST_REPO_ROOT"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The built executable: next to this test bundle (same build directory), else `.build/debug`.
    static func locateBinary() -> String? {
        var candidates: [String] = []
        for b in Bundle.allBundles where b.bundlePath.hasSuffix(".xctest") {
            candidates.append(URL(fileURLWithPath: b.bundlePath).deletingLastPathComponent().appendingPathComponent("liverelay").path)
        }
        candidates.append(repoRoot + "/.build/debug/liverelay")
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func make() throws -> CLIEnvironment {
        guard let base = ProcessInfo.processInfo.environment["LIVERELAY_TEST_DATABASE_URL"] else {
            throw FixtureFailure("LIVERELAY_TEST_DATABASE_URL is not set; run deploy/local/test")
        }
        guard let bin = locateBinary() else { throw FixtureFailure("no built liverelay binary; run swift build first") }
        return try CLIEnvironment(base: base, binary: bin)
    }

    private init(base: String, binary: String) throws {
        self.binary = binary
        dbName = "lr_cli_" + SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()
        adminConninfo = base
        let migrator = try Migrator(directory: URL(fileURLWithPath: Self.repoRoot + "/Migrations"))
        let admin = try PostgresConnection(base)
        try admin.execute("CREATE DATABASE \(dbName)")
        admin.close()
        conninfo = base + (base.contains("?") ? "&" : "?") + "dbname=\(dbName)"
        pool = PostgresPool(conninfo: conninfo, maxConnections: 8, acquireTimeoutSeconds: 5)
        try migrator.migrate(pool: pool)
        db = Database(pool: pool)
        let log = Logger(minimum: .error, sink: { _ in })
        auth = Authenticator(db: db, log: log)
        auth.startInvalidationListener(conninfo: conninfo)
        events = EventWaiter(log: log)
        events.start(conninfo: conninfo)
        kek = SecureRandom.bytes(32)
        let metrics = MetricsRegistry()
        let ctx = APIContext(db: db, auth: auth, kek: try AESGCM(key: kek), log: log, metrics: metrics, migrator: migrator, events: events)
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 4),
                            router: APIRoutes.router(ctx, defaultExpirationSeconds: 3600), metrics: metrics, log: { _ in })
        try server.start()
        baseURL = "http://127.0.0.1:\(server.port)"
    }

    func tearDown() {
        server.shutdown(drainTimeoutSeconds: 5)
        auth.stop()
        events.stop()
        pool.close()
        Thread.sleep(forTimeInterval: 0.3)
        if let admin = try? PostgresConnection(adminConninfo) {
            _ = try? admin.execute("DROP DATABASE IF EXISTS \(dbName) WITH (FORCE)")
            admin.close()
        }
    }

    struct Run {
        let status: Int32
        let stdout: String
        let stderr: String
        var json: JSONValue { (try? JSONValue.parse(stdout)) ?? .null }
    }

    /// Runs `liverelay args…` with `env` on top of a minimal environment; waits at most 60 s.
    func run(_ args: [String], env: [String: String] = [:], stdin: String? = nil) throws -> Run {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = args
        var e: [String: String] = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "LIVERELAY_LOG_LEVEL": "error"]
        for (k, v) in env { e[k] = v }
        p.environment = e
        p.currentDirectoryURL = URL(fileURLWithPath: Self.repoRoot)
        let out = Pipe(), err = Pipe(), inp = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = inp
        try p.run()
        if let stdin { inp.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? inp.fileHandleForWriting.close()
        // Read both pipes concurrently so a full pipe never blocks the child.
        let errData = Mutex<Data>(Data())
        let reader = Thread { let d = err.fileHandleForReading.readDataToEndOfFile(); errData.withLock { $0 = d } }
        reader.start()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        while !reader.isFinished { Thread.sleep(forTimeInterval: 0.01) }
        return Run(status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self),
                   stderr: errData.withLock { String(decoding: $0, as: UTF8.self) })
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
        var req = URLRequest(url: URL(string: baseURL + path)!)
        req.httpMethod = method
        req.setValue("Bearer \(credential)", forHTTPHeaderField: "Authorization")
        if let body { req.httpBody = Data(body.serialized()); req.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<(Int, [UInt8])>((-1, []))
        URLSession.shared.dataTask(with: req) { data, resp, _ in
            result.withLock { $0 = ((resp as? HTTPURLResponse)?.statusCode ?? -1, Array(data ?? Data())) }
            done.signal()
        }.resume()
        done.wait()
        let (s, b) = result.withLock { $0 }
        return Reply(status: s, json: (try? JSONValue.parse(b)) ?? .null)
    }

    /// A tenant (through `liverelay admin tenants create`), an iOS installation with a ready
    /// start target (through the device API) and a sender key covering it.
    struct World { let tenantId: String; let master: String; let sender: String; let startTarget: String; let templateVersion: String }

    func world(quota: Int = 1000) throws -> World {
        let t = try admin(["tenants", "create", "--name", "CLI", "--daily-push-quota", String(quota)])
        guard t.status == 0, let tenant = t.json["tenant"]?["id"]?.stringValue, let master = t.json["master_key"]?["credential"]?.stringValue,
              let pub = t.json["publishable_key"]?["credential"]?.stringValue else {
            throw FixtureFailure("admin tenants create failed: \(t.status) \(t.stderr)")
        }
        let inst = call("POST", "/v1/installations", ["platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
                                                      "install_id": .string(UUID().uuidString)], as: pub)
        guard let insId = inst.json["installation_id"]?.stringValue, let insCred = inst.json["credential"]?.stringValue else {
            throw FixtureFailure("installation failed: \(inst.status) \(inst.json.jsonString)")
        }
        let prep = call("POST", "/v1/installations/\(insId)/start-targets", [
            "binding_id": "widget", "activity_type": "delivery", "attributes_type": "DeliveryAttributes", "renderer_digest": "sha256:r1",
            "schema": ["type": "object", "required": ["eta"], "properties": ["eta": ["type": "string", "maxLength": 20]]],
            "bundle": ["bytes": 1000, "modules": 1, "files": 1]], as: insCred)
        guard let st = prep.json["start_target_id"]?.stringValue, let tv = prep.json["template_version"]?.stringValue else {
            throw FixtureFailure("prepare failed: \(prep.status) \(prep.json.jsonString)")
        }
        let tok = call("PUT", "/v1/installations/\(insId)/start-targets/\(st)/push-to-start-token", ["token": "a1b2c3d4"], as: insCred)
        guard tok.status == 200 else { throw FixtureFailure("token failed: \(tok.status)") }
        let sk = call("POST", "/v1/remote-updates/sender-keys", [
            "targets": [.string(st)], "created_from": [.string(st)],
            "permissions": ["activities:start", "activities:read-state", "activities:update", "activities:end"],
            "idempotency_key": .string(UUID().uuidString)], as: master)
        guard let sender = sk.json["credential"]?.stringValue else { throw FixtureFailure("sender key failed: \(sk.status)") }
        return World(tenantId: tenant, master: master, sender: sender, startTarget: st, templateVersion: tv)
    }
}
