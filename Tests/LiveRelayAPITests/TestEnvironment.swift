import Foundation
import XCTest
import LiveRelayTestSupport
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// A real LiveRelay API on 127.0.0.1 (ephemeral port, built by `APIStack` as `serve` builds it)
/// over a fresh PostgreSQL database made for one test case (a clone of the migrated template),
/// with every log line captured (to prove no secret is ever logged). Needs
/// `LIVERELAY_TEST_DATABASE_URL` (set by deploy/local/test); throws `FixtureFailure` without it.
final class TestEnvironment: @unchecked Sendable {
    let database: TestDatabase
    let pool: PostgresPool
    let db: Database
    let api: APIStack
    let logs = LineCapture()
    var conninfo: String { database.conninfo }
    var baseURL: String { api.baseURL }

    /// `now` (the API's clock), `limits` and `fcmURL` go to the `APIContext` (defaults as in production);
    /// `webhookAllowPrivate` lets webhook URLs use `http://` and loopback receivers.
    static func make(
        now: @escaping @Sendable () -> Date = Date.init, limits: TenantLimits = TenantLimits(),
        fcmURL: String = "https://fcm.googleapis.com", webhookAllowPrivate: Bool = false,
        channels: any ChannelManaging = UnconfiguredChannelManager()
    ) throws -> TestEnvironment {
        try TestEnvironment(now: now, limits: limits, fcmURL: fcmURL, webhookAllowPrivate: webhookAllowPrivate, channels: channels)
    }

    private init(
        now: @escaping @Sendable () -> Date, limits: TenantLimits, fcmURL: String, webhookAllowPrivate: Bool,
        channels: any ChannelManaging
    ) throws {
        database = try TestDatabase(prefix: "lr_test")
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 12, acquireTimeoutSeconds: 5)
        db = Database(pool: pool)
        let captured = logs
        let log = Logger(minimum: .debug, sink: captured.write)
        let (db, metrics, migrator) = (db, MetricsRegistry(), try TestDatabase.migrator())
        api = try APIStack(
            db: db, conninfo: database.conninfo, log: log, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 8),
            metrics: metrics, serverLog: captured.write
        ) { auth, events in
            APIContext(
                db: db, auth: auth, kek: try AESGCM(key: SecureRandom.bytes(32)), log: log, metrics: metrics, migrator: migrator,
                events: events, webhookAllowPrivate: webhookAllowPrivate, now: now, limits: limits, fcmURL: fcmURL,
                channels: channels)
        }
    }

    /// Stops the server and drops the database.
    func tearDown() {
        api.stop(drainTimeoutSeconds: 5)
        pool.close()
        database.drop()
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
    func call(
        _ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String? = nil,
        headers: [String: String] = [:], rawBody: [UInt8]? = nil
    ) -> Reply {
        let r = TestHTTP.send(method, baseURL + path, body: rawBody ?? body.map { $0.serialized() }, credential: credential, headers: headers)
        return Reply(status: r.status, headers: r.headers, json: (try? JSONValue.parse(r.body)) ?? .null, raw: r.body)
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

/// A test class whose every test runs against its own `TestEnvironment` (`env`, made in
/// `setUpWithError`, torn down in `tearDown`).
class APITestCase: XCTestCase {
    var env: TestEnvironment!
    override func setUpWithError() throws { env = try TestEnvironment.make() }
    override func tearDown() { env?.tearDown() }
}
