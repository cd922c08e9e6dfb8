import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import Crypto
import Delivery
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayApp
import LiveRelaySandbox
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Synchronization

/// Everything the README tour runs, in one process over real sockets: a fresh PostgreSQL
/// database (migrated), the LiveRelay HTTP API on an ephemeral port, the local APNs/FCM sandbox
/// (HTTP/2 + TLS with its own CA, control endpoint on another ephemeral port, files in a temporary
/// directory), the provider sender trusting the sandbox CA, and the dispatcher sending queued
/// operations through it. Needs `LIVERELAY_TEST_DATABASE_URL` (deploy/local/test).
final class EndToEndHarness: @unchecked Sendable {
    let dbName: String
    let conninfo: String
    let adminConninfo: String
    let pool: PostgresPool
    let db: Database
    let server: HTTPServer
    let auth: Authenticator
    let events: EventWaiter
    let baseURL: String
    let sandbox: Sandbox
    let sandboxDir: URL
    let workDir: URL
    let sender: ProviderSender
    let credentials: DatabaseProviderCredentialSource
    /// The key-encryption key of this API (webhook secrets are sealed under it).
    let kek: AESGCM
    let metrics = MetricsRegistry()
    let logs = LineCapture()
    private var stopDispatcher: (() -> Void)?
    var devices: [DeviceSimulatorRunner] = []
    /// Everything the simulated devices printed (events and lock screens).
    let deviceOutput = LineCapture()

    static var repoRoot: String {
        ProcessInfo.processInfo.environment["LIVERELAY_TEST_REPO_ROOT"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// - Parameter clock: the API's and the dispatcher's clock (`APIContext.now`,
    ///   `DispatcherConfiguration.clock`); the wall clock unless a test slides time.
    static func make(clock: @escaping @Sendable () -> Date = Date.init) throws -> EndToEndHarness {
        guard let base = ProcessInfo.processInfo.environment["LIVERELAY_TEST_DATABASE_URL"] else {
            throw FixtureFailure("LIVERELAY_TEST_DATABASE_URL is not set; run deploy/local/test")
        }
        return try EndToEndHarness(base: base, clock: clock)
    }

    private init(base: String, clock: @escaping @Sendable () -> Date) throws {
        dbName = "lr_e2e_" + SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()
        adminConninfo = base
        let migrator = try Migrator(directory: URL(fileURLWithPath: Self.repoRoot + "/Migrations"))
        let admin = try PostgresConnection(base)
        try admin.execute("CREATE DATABASE \(dbName)")
        admin.close()
        conninfo = base + (base.contains("?") ? "&" : "?") + "dbname=\(dbName)"
        pool = PostgresPool(conninfo: conninfo, maxConnections: 16, acquireTimeoutSeconds: 10)
        try migrator.migrate(pool: pool)
        db = Database(pool: pool)

        workDir = FileManager.default.temporaryDirectory.appendingPathComponent("lr-e2e-\(UUID().uuidString.prefix(8))")
        sandboxDir = workDir.appendingPathComponent("sandbox")
        try FileManager.default.createDirectory(at: sandboxDir, withIntermediateDirectories: true)
        sandbox = try Sandbox(configuration: SandboxConfiguration(port: 0, controlPort: 0, directory: sandboxDir, fresh: true))
        try sandbox.start()

        let captured = logs
        let log = Logger(minimum: .info, sink: { line in captured.append(line) })
        kek = try AESGCM(key: SecureRandom.bytes(32))
        auth = Authenticator(db: db, log: log)
        auth.startInvalidationListener(conninfo: conninfo)
        events = EventWaiter(log: log)
        events.start(conninfo: conninfo)
        let ctx = APIContext(db: db, auth: auth, kek: kek, log: log, metrics: metrics, migrator: migrator, events: events,
                             webhookAllowPrivate: true,  // webhook receivers of the tests listen on 127.0.0.1
                             now: clock, fcmURL: sandbox.baseURL)  // as `serve` with the sandbox's env: its token_uri is on this origin
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 8),
                           router: APIRoutes.router(ctx, defaultExpirationSeconds: 3600), metrics: metrics, log: { _ in })
        try server.start()
        baseURL = "http://127.0.0.1:\(server.port)"

        // The provider side exactly as `serve` wires it, pointed at the sandbox (its `env` file).
        let base = URL(string: sandbox.baseURL)!
        let endpoints = ProviderEndpoints(apnsProductionURL: base, apnsSandboxURL: base, fcmURL: base, extraCAFile: sandbox.files["ca.pem"],
                                          connectTimeoutSeconds: 5, requestTimeoutSeconds: 10)
        (sender, credentials) = ProviderSender.make(db: db, kek: kek, endpoints: endpoints, metrics: metrics, log: log)
        stopDispatcher = EndToEndDispatch.start(db: db, conninfo: conninfo, sender: sender, metrics: metrics, log: log, clock: clock)
    }

    /// Skips the test when this build has no dispatcher (before the dispatcher branch is merged).
    func requireDispatcher() throws {
        if stopDispatcher == nil { throw FixtureFailure("no dispatcher in this build: queued operations are never sent") }
    }

    func tearDown() {
        for d in devices { d.stop() }
        stopDispatcher?()
        server.shutdown(drainTimeoutSeconds: 5)
        sender.close()
        credentials.stop()
        auth.stop()
        events.stop()
        sandbox.stop()
        pool.close()
        Thread.sleep(forTimeInterval: 0.2)  // let listener connections close before the drop
        if let admin = try? PostgresConnection(adminConninfo) {
            _ = try? admin.execute("DROP DATABASE IF EXISTS \(dbName) WITH (FORCE)")
            admin.close()
        }
        try? FileManager.default.removeItem(at: workDir)
    }

    // MARK: HTTP

    struct Reply: CustomStringConvertible {
        let status: Int
        let headers: [String: String]
        let json: JSONValue
        subscript(_ key: String) -> JSONValue? { json[key] }
        var errorCode: String? { json["error"]?["code"]?.stringValue }
        var description: String { "\(status) \(json.jsonString)" }
    }

    func call(_ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String? = nil) -> Reply {
        var req = URLRequest(url: URL(string: baseURL + path)!, timeoutInterval: 90)
        req.httpMethod = method
        if let credential { req.setValue("Bearer \(credential)", forHTTPHeaderField: "Authorization") }
        if let body {
            req.httpBody = Data(body.serialized())
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<(Int, [String: String], [UInt8])>((0, [:], []))
        URLSession.shared.dataTask(with: req) { data, resp, _ in
            let http = resp as? HTTPURLResponse
            var h: [String: String] = [:]
            for (k, v) in http?.allHeaderFields ?? [:] { h[String(describing: k).lowercased()] = String(describing: v) }
            result.withLock { $0 = (http?.statusCode ?? -1, h, Array(data ?? Data())) }
            done.signal()
        }.resume()
        done.wait()
        let (status, h, bytes) = result.withLock { $0 }
        return Reply(status: status, headers: h, json: (try? JSONValue.parse(bytes)) ?? .null)
    }

    // MARK: the tour's set-up steps

    /// `liverelay admin operator-keys create` (straight in the database, as the command does).
    func operatorKey() throws -> String {
        let minted = try CredentialMint.make(.operator)
        try db.system { c in try KeyStore.insertOperatorKey(c, id: minted.id, label: "e2e", secretHash: minted.secretHash) }
        return minted.token
    }

    struct Tenant { let id: String; let master: String; let publishable: String }

    /// Operator key → `POST /v1/operator/tenants` → master and publishable keys; then the sandbox's
    /// demo credentials as the tenant's APNs (topic `appId`) and FCM credentials.
    func tenantWithSandboxCredentials(appId: String) throws -> Tenant {
        let op = try operatorKey()
        let t = call("POST", "/v1/operator/tenants", ["name": "Acme Deliveries", "daily_push_quota": 1000], as: op)
        XCTAssertEqual(t.status, 201, "\(t)")
        guard let id = t["tenant"]?["id"]?.stringValue, let master = t["master_key"]?["credential"]?.stringValue,
              let pub = t["publishable_key"]?["credential"]?.stringValue else { throw FixtureFailure("tenant creation failed: \(t)") }
        // What the README has the user paste: the files the sandbox wrote.
        let apns = try JSONValue.parse(try String(contentsOf: sandboxDir.appendingPathComponent("apns.json"), encoding: .utf8))
        let p8 = try String(contentsOf: sandboxDir.appendingPathComponent("apns-key.p8"), encoding: .utf8)
        let sa = try JSONValue.parse(try String(contentsOf: sandboxDir.appendingPathComponent("fcm-service-account.json"), encoding: .utf8))
        let a = call("PUT", "/v1/provider-credentials/apns", [
            "team_id": apns["team_id"] ?? .null, "key_id": apns["key_id"] ?? .null, "private_key": .string(p8),
            "topics": [.string(appId)], "environment": "sandbox"], as: master)
        XCTAssertEqual(a.status, 201, "\(a)")
        XCTAssertEqual(a["fingerprint"]?.stringValue, sandbox.apnsKey.publicKey.fingerprint)
        let f = call("PUT", "/v1/provider-credentials/fcm", ["service_account": sa], as: master)
        XCTAssertEqual(f.status, 201, "\(f)")
        return Tenant(id: id, master: master, publishable: pub)
    }

    /// A simulated device (state file in the work directory), registered with `publishable`.
    func device(_ platform: DevicePlatform, appId: String, publishable: String) throws -> DeviceSimulatorRunner {
        let state = DeviceSimulatorState(platform: platform, appId: appId, apiURL: baseURL, sandboxURL: sandbox.controlURL)
        let lines = deviceOutput
        let d = DeviceSimulatorRunner(state: state, stateFile: workDir.appendingPathComponent("device-\(platform.rawValue).json"),
                                      output: { line in lines.append(line) })
        devices.append(d)
        try d.register(publishableKey: publishable)
        return d
    }

    /// The demo template the README uses.
    static func demoTemplate() throws -> JSONValue {
        try JSONValue.parse(try String(contentsOfFile: repoRoot + "/deploy/demo/delivery-template.json", encoding: .utf8))
    }

    /// Polls `condition` (every 20 ms, at most `seconds`) where no signal exists; fails the test
    /// when it never holds.
    @discardableResult
    func eventually(_ what: String, within seconds: Double = 20, file: StaticString = #filePath, line: UInt = #line,
                    _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("\(what): not within \(seconds) s", file: file, line: line)
        return false
    }
}

/// Lines shared between threads.
final class LineCapture: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var text: String { lines.withLock { $0.joined(separator: "\n") } }
}
