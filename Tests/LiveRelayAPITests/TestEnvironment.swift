import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Synchronization

/// A real LiveRelay API on 127.0.0.1 (ephemeral port) over a fresh PostgreSQL database made
/// for one test case, with every log line captured (to prove no secret is ever logged).
/// Needs `LIVERELAY_TEST_DATABASE_URL` (set by deploy/local/test); tests skip without it.
final class TestEnvironment: @unchecked Sendable {
    let dbName: String
    let conninfo: String
    let adminConninfo: String
    let pool: PostgresPool
    let db: Database
    let server: HTTPServer
    let auth: Authenticator
    let events: EventWaiter
    let baseURL: String
    let logs = LogCapture()

    /// `now` (the API's clock), `limits` and `fcmURL` go to the `APIContext` (defaults as in production);
    /// `webhookAllowPrivate` lets webhook URLs use `http://` and loopback receivers.
    static func make(now: @escaping @Sendable () -> Date = Date.init, limits: TenantLimits = TenantLimits(),
                     fcmURL: String = "https://fcm.googleapis.com", webhookAllowPrivate: Bool = false,
                     channels: any ChannelManaging = UnconfiguredChannelManager()) throws -> TestEnvironment {
        guard let base = ProcessInfo.processInfo.environment["LIVERELAY_TEST_DATABASE_URL"] else {
            throw FixtureFailure("LIVERELAY_TEST_DATABASE_URL is not set; run deploy/local/test")
        }
        return try TestEnvironment(base: base, now: now, limits: limits, fcmURL: fcmURL, webhookAllowPrivate: webhookAllowPrivate, channels: channels)
    }

    private init(base: String, now: @escaping @Sendable () -> Date, limits: TenantLimits, fcmURL: String, webhookAllowPrivate: Bool,
                 channels: any ChannelManaging) throws {
        dbName = "lr_test_" + SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()
        adminConninfo = base
        let repo = ProcessInfo.processInfo.environment["LIVERELAY_TEST_REPO_ROOT"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let migrator = try Migrator(directory: URL(fileURLWithPath: repo + "/Migrations"))
        let template = try TestEnvironment.migratedTemplate(base: base, migrator: migrator)
        let admin = try PostgresConnection(base)
        try admin.execute("CREATE DATABASE \(dbName) TEMPLATE \(template)")
        admin.close()
        conninfo = TestEnvironment.conninfo(base, db: dbName)
        pool = PostgresPool(conninfo: conninfo, maxConnections: 12, acquireTimeoutSeconds: 5)
        db = Database(pool: pool)
        let captured = logs
        let log = Logger(minimum: .debug, sink: { line in captured.append(line) })
        auth = Authenticator(db: db, log: log)
        auth.startInvalidationListener(conninfo: conninfo)
        let metrics = MetricsRegistry()
        events = EventWaiter(log: log)
        events.start(conninfo: conninfo)
        let ctx = APIContext(db: db, auth: auth, kek: try AESGCM(key: SecureRandom.bytes(32)), log: log, metrics: metrics, migrator: migrator,
                             events: events, webhookAllowPrivate: webhookAllowPrivate, now: now, limits: limits, fcmURL: fcmURL,
                             channels: channels)
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 8),
                            router: APIRoutes.router(ctx, defaultExpirationSeconds: 3600), metrics: metrics,
                            log: { line in captured.append(line) })
        try server.start()
        baseURL = "http://127.0.0.1:\(server.port)"
    }

    static func conninfo(_ base: String, db: String) -> String { base + (base.contains("?") ? "&" : "?") + "dbname=\(db)" }

    private static let templateLock = NSLock()
    nonisolated(unsafe) private static var templateName: String?

    /// One migrated database per test process, cloned (`CREATE DATABASE … TEMPLATE`) for
    /// each test: migrations run once instead of once per test.
    static func migratedTemplate(base: String, migrator: Migrator) throws -> String {
        templateLock.lock()
        defer { templateLock.unlock() }
        if let t = templateName { return t }
        let name = "lr_tpl_" + SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()
        let admin = try PostgresConnection(base)
        try admin.execute("CREATE DATABASE \(name)")
        admin.close()
        let p = PostgresPool(conninfo: conninfo(base, db: name), maxConnections: 1)
        try migrator.migrate(pool: p)
        p.close()
        templateName = name
        return name
    }

    /// Stops the server and drops the database.
    func tearDown() {
        server.shutdown(drainTimeoutSeconds: 5)
        auth.stop()
        events.stop()
        pool.close()
        Thread.sleep(forTimeInterval: 0.3)  // let the listener connection close
        if let admin = try? PostgresConnection(adminConninfo) {
            _ = try? admin.execute("DROP DATABASE IF EXISTS \(dbName) WITH (FORCE)")
            admin.close()
        }
    }

    struct Reply {
        let status: Int
        let headers: [String: String]
        let json: JSONValue
        let raw: [UInt8]
        subscript(_ key: String) -> JSONValue? { json[key] }
        var errorCode: String? { json["error"]?["code"]?.stringValue }
    }

    /// Sends one request with an optional bearer credential and JSON body.
    func call(_ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String? = nil,
              headers: [String: String] = [:], rawBody: [UInt8]? = nil) -> Reply {
        var req = URLRequest(url: URL(string: baseURL + path)!)
        req.httpMethod = method
        if let credential { req.setValue("Bearer \(credential)", forHTTPHeaderField: "Authorization") }
        for (k, v) in headers { req.setValue(v, forHTTPHeaderField: k) }
        if let rawBody { req.httpBody = Data(rawBody) } else if let body { req.httpBody = Data(body.serialized()) }
        if req.httpBody != nil { req.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<(Int, [String: String], [UInt8])>((0, [:], []))
        URLSession.shared.dataTask(with: req) { data, resp, err in
            let http = resp as? HTTPURLResponse
            var h: [String: String] = [:]
            for (k, v) in http?.allHeaderFields ?? [:] { h[String(describing: k).lowercased()] = String(describing: v) }
            result.withLock { $0 = (http?.statusCode ?? -1, h, Array(data ?? Data())) }
            done.signal()
        }.resume()
        done.wait()
        let (status, h, bytes) = result.withLock { $0 }
        return Reply(status: status, headers: h, json: (try? JSONValue.parse(bytes)) ?? .null, raw: bytes)
    }

    /// A fresh operator credential, made straight in the database like `liverelay admin operator-keys create`.
    func operatorKey() throws -> String {
        let minted = try CredentialMint.make(.operator)
        try db.system { c in try KeyStore.insertOperatorKey(c, id: minted.id, label: "test", secretHash: minted.secretHash) }
        return minted.token
    }

    /// A tenant with its first master key and any-app publishable key.
    struct Tenant { let id: String; let master: String; let masterId: String; let publishable: String }

    func tenant(name: String = "Acme", quota: Int64 = 1000) throws -> Tenant {
        let c = try TenantProvisioning.create(db, name: name, dailyPushQuota: quota, actorId: "test", requestId: "test")
        return Tenant(id: c.tenant.id, master: c.masterCredential, masterId: c.masterKey.id, publishable: c.publishableCredential)
    }

    /// Every captured log line so far.
    var logText: String { logs.text }
}

/// Captured log lines, shared between the logger and the test.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var text: String { lines.withLock { $0.joined(separator: "\n") } }
}
