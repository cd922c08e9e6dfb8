import Foundation
import XCTest
import LiveRelayTestSupport
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

/// Everything the README tour runs, in one process over real sockets: a fresh PostgreSQL
/// database (migrated), the LiveRelay HTTP API on an ephemeral port, the local APNs/FCM sandbox
/// (HTTP/2 + TLS with its own CA, control endpoint on another ephemeral port, files in a temporary
/// directory), the provider sender trusting the sandbox CA, and the dispatcher sending queued
/// operations through it. Needs `LIVERELAY_TEST_DATABASE_URL` (deploy/local/test).
final class EndToEndHarness: @unchecked Sendable {
    let database: TestDatabase
    let pool: PostgresPool
    let db: Database
    let api: APIStack
    var conninfo: String { database.conninfo }
    var baseURL: String { api.baseURL }
    let sandbox: Sandbox
    let sandboxDir, workDir: URL
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

    static var repoRoot: String { TestDatabase.repoRoot }

    /// - Parameter clock: the API's and the dispatcher's clock (`APIContext.now`,
    ///   `DispatcherConfiguration.clock`); the wall clock unless a test slides time.
    static func make(clock: @escaping @Sendable () -> Date = Date.init) throws -> EndToEndHarness { try EndToEndHarness(clock: clock) }

    private init(clock: @escaping @Sendable () -> Date) throws {
        database = try TestDatabase(prefix: "lr_e2e")
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 16, acquireTimeoutSeconds: 10)
        db = Database(pool: pool)
        let migrator = try TestDatabase.migrator()

        workDir = FileManager.default.temporaryDirectory.appendingPathComponent("lr-e2e-\(UUID().uuidString.prefix(8))")
        sandboxDir = workDir.appendingPathComponent("sandbox")
        try FileManager.default.createDirectory(at: sandboxDir, withIntermediateDirectories: true)
        sandbox = try Sandbox(configuration: SandboxConfiguration(port: 0, controlPort: 0, directory: sandboxDir, fresh: true))
        try sandbox.start()

        let captured = logs
        // Benches (LIVERELAY_TEST_LOG_STDERR=1) also see the product's warnings and errors.
        let echo = ProcessInfo.processInfo.environment["LIVERELAY_TEST_LOG_STDERR"] == "1"
        let log = Logger(
            minimum: .info,
            sink: { line in
                captured.append(line)
                if echo, line.contains("\"level\":\"warning\"") || line.contains("\"level\":\"error\"") || line.contains("spaced out") {
                    FileHandle.standardError.write(Data((line + "\n").utf8))
                }
            })
        kek = try AESGCM(key: SecureRandom.bytes(32))
        // The provider side exactly as `serve` wires it, pointed at the sandbox (its `env` file);
        // built before the API, whose channel routes create APNs channels through it.
        let base = URL(string: sandbox.baseURL)!
        var endpoints = ProviderEndpoints(
            apnsProductionURL: base, apnsSandboxURL: base, fcmURL: base, extraCAFile: sandbox.files["ca.pem"],
            connectTimeoutSeconds: 5, requestTimeoutSeconds: 10)
        endpoints.setChannelURLs(base)
        (sender, credentials) = ProviderSender.make(db: db, kek: kek, endpoints: endpoints, metrics: metrics, log: log)
        let (db, metrics, kek, sandboxURL, channels) = (db, metrics, kek, sandbox.baseURL, APNsChannelProvider(client: sender.channels))
        api = try APIStack(
            db: db, conninfo: database.conninfo, log: log, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 8),
            metrics: metrics, serverLog: { _ in }
        ) { auth, events in
            APIContext(
                db: db, auth: auth, kek: kek, log: log, metrics: metrics, migrator: migrator, events: events,
                webhookAllowPrivate: true,  // webhook receivers of the tests listen on 127.0.0.1
                now: clock, fcmURL: sandboxURL,  // as `serve` with the sandbox's env: its token_uri is on this origin
                channels: channels)
        }
        stopDispatcher = EndToEndDispatch.start(db: db, conninfo: database.conninfo, sender: sender, metrics: metrics, log: log, clock: clock)
    }

    /// Skips the test when this build has no dispatcher (before the dispatcher branch is merged).
    func requireDispatcher() throws {
        if stopDispatcher == nil { throw FixtureFailure("no dispatcher in this build: queued operations are never sent") }
    }

    func tearDown() {
        for d in devices { d.stop() }
        stopDispatcher?()
        api.server.shutdown(drainTimeoutSeconds: 5)
        sender.close()
        credentials.stop()
        api.auth.stop()
        api.events.stop()
        sandbox.stop()
        pool.close()
        database.drop()
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

    /// Creates a sender key for start target `st` (its `targets` and `created_from`) with the
    /// tour's four permissions (`TourTests.permissions`) as `master`; returns its credential.
    func senderKey(startTarget st: String, idempotencyKey: String, as master: String) throws -> String {
        let key = call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(st)], "created_from": [.string(st)], "permissions": TourTests.permissions,
                "idempotency_key": .string(idempotencyKey)
            ], as: master)
        return try XCTUnwrap(key["credential"]?.stringValue, "\(key)")
    }

    /// Posts the demo start (`POST /v1/remote-updates/live-activities/start` plus `query`) as
    /// `credential`: start target `st`, template version `tv`, state and alert "Preparing".
    func startPreparing(
        startTarget st: String, templateVersion tv: String, idempotencyKey: String, query: String = "", as credential: String
    ) -> Reply {
        call(
            "POST", "/v1/remote-updates/live-activities/start" + query,
            [
                "start_target_id": .string(st), "template_version": .string(tv), "state": ["message": "Preparing"],
                "alert": ["title": "Preparing", "body": "Your order is being prepared"], "idempotency_key": .string(idempotencyKey)
            ], as: credential)
    }

    func call(_ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String? = nil) -> Reply {
        let r = TestHTTP.send(method, baseURL + path, body: body.map { $0.serialized() }, credential: credential, timeoutSeconds: 90)
        return Reply(status: r.status, headers: r.headers, json: (try? JSONValue.parse(r.body)) ?? .null)
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
            let pub = t["publishable_key"]?["credential"]?.stringValue
        else { throw FixtureFailure("tenant creation failed: \(t)") }
        // What the README has the user paste: the files the sandbox wrote.
        let apns = try JSONValue.parse(try String(contentsOf: sandboxDir.appendingPathComponent("apns.json"), encoding: .utf8))
        let p8 = try String(contentsOf: sandboxDir.appendingPathComponent("apns-key.p8"), encoding: .utf8)
        let sa = try JSONValue.parse(try String(contentsOf: sandboxDir.appendingPathComponent("fcm-service-account.json"), encoding: .utf8))
        let a = call(
            "PUT", "/v1/provider-credentials/apns",
            [
                "team_id": apns["team_id"] ?? .null, "key_id": apns["key_id"] ?? .null, "private_key": .string(p8),
                "topics": [.string(appId)], "environment": "sandbox"
            ], as: master)
        XCTAssertEqual(a.status, 201, "\(a)")
        XCTAssertEqual(a["fingerprint"]?.stringValue, sandbox.apnsKey.publicKey.fingerprint)
        let f = call("PUT", "/v1/provider-credentials/fcm", ["service_account": sa], as: master)
        XCTAssertEqual(f.status, 201, "\(f)")
        return Tenant(id: id, master: master, publishable: pub)
    }

    /// A simulated device (state file in the work directory), registered with `publishable`.
    func device(
        _ platform: DevicePlatform, appId: String, publishable: String, osVersion: String? = nil, name: String? = nil
    ) throws -> DeviceSimulatorRunner {
        var state = DeviceSimulatorState(platform: platform, appId: appId, apiURL: baseURL, sandboxURL: sandbox.controlURL)
        state.osVersion = osVersion
        let lines = deviceOutput
        let d = DeviceSimulatorRunner(
            state: state, stateFile: workDir.appendingPathComponent("device-\(name ?? platform.rawValue).json"),
            output: { line in lines.append(line) })
        devices.append(d)
        try d.register(publishableKey: publishable)
        return d
    }

    /// The demo template the README uses.
    static func demoTemplate() throws -> JSONValue {
        try JSONValue.parse(try String(contentsOfFile: repoRoot + "/deploy/demo/delivery-template.json", encoding: .utf8))
    }
}

/// A test class whose every test gets its own `EndToEndHarness` (`h`, made in `setUpWithError`,
/// torn down in `tearDown`).
class EndToEndTestCase: XCTestCase {
    var h: EndToEndHarness!
    override func setUpWithError() throws { h = try EndToEndHarness.make() }
    override func tearDown() { h?.tearDown() }
}
