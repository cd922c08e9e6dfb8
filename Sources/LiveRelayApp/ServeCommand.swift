import Foundation
import Crypto
import Delivery
import Dispatch
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// `liverelay serve` / `api`: API server (+ dispatcher and maintenance once they exist) in
/// one process until SIGTERM or SIGINT, then a graceful drain in reverse start order
/// (ARCHITECTURE "Services with a lifecycle").
enum ServeCommand {
    static func run(config: Configuration, log: Logger, withDispatcher: Bool = false) throws {
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let pool = try rt.openDatabase(poolSize: config.databasePoolSize)
        let db = Database(pool: pool)
        let metrics = MetricsRegistry()
        metrics.gauge("liverelay_db_pool_connections", help: "PostgreSQL pool connections by state", labels: ["state"]) {
            let s = pool.stats
            return [(["open"], Double(s.open)), (["idle"], Double(s.idle)), (["in_use"], Double(s.inUse)),
                    (["waiting"], Double(s.waiting)), (["max"], Double(s.maxConnections))]
        }
        let auth = Authenticator(db: db, log: log.with(["component": "auth"]))
        auth.startInvalidationListener(conninfo: rt.conninfo)
        let events = EventWaiter(log: log.with(["component": "events"]))
        events.start(conninfo: rt.conninfo)
        let ctx = APIContext(db: db, auth: auth, kek: try AESGCM(key: rt.kek), log: log, metrics: metrics, migrator: rt.migrator,
                             events: events, defaultExpirationSeconds: config.defaultExpirationSeconds)
        let router = APIRoutes.router(ctx, defaultExpirationSeconds: config.defaultExpirationSeconds)
        var httpConfig = HTTPServerConfiguration(host: config.listenHost, port: config.listenPort, threads: config.httpThreads)
        httpConfig.accessLog = log.minimum <= .info  // access lines are `info`: not built when they would be dropped
        let server = HTTPServer(configuration: httpConfig, router: router, metrics: metrics, log: { line in log.raw(line) })
        try server.start()
        let maintenance = log.context["component"] == "api" ? nil : MaintenanceService(db: db, log: log.with(["component": "maintenance"]))
        maintenance?.start()
        var dispatcher: Dispatcher?
        var stopSender: (() -> Void)?
        if withDispatcher {
            let push = try WorkerCommand.makePushSender(config: config, db: db, kek: rt.kek, metrics: metrics, log: log)
            let d = Dispatcher(db: db, conninfo: rt.conninfo, sender: push.sender,
                               configuration: try WorkerCommand.dispatcherConfiguration(config), metrics: metrics, log: log)
            d.start()
            dispatcher = d
            stopSender = push.stop
        }
        log.info("liverelay listening", ["address": .string("http://\(config.listenHost):\(server.port)"),
                                         "database": .string(config.databaseURL == nil ? "embedded" : "DATABASE_URL")])
        let signal = waitForTermination()
        log.info("shutting down", ["signal": .string(signal)])
        maintenance?.stop()
        server.shutdown(drainTimeoutSeconds: 30)
        dispatcher?.stop(timeoutSeconds: 20)  // before the pool closes
        stopSender?()
        auth.stop()
        events.stop()
        db.flushNotifications()
        pool.close()
        log.info("stopped")
    }

    /// Blocks until SIGTERM or SIGINT; returns its name.
    static func waitForTermination() -> String {
        let sem = DispatchSemaphore(value: 0)
        let got = LockedBox("")
        var sources: [DispatchSourceSignal] = []
        for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            Foundation.signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { got.set(name); sem.signal() }
            s.resume()
            sources.append(s)
        }
        sem.wait()
        _ = sources
        return got.get()
    }
}

/// A tiny lock-protected box for values handed across threads.
final class LockedBox<T>: @unchecked Sendable {  // all access under `lock`
    private var value: T
    private let lock = NSLock()
    init(_ v: T) { value = v }
    func set(_ v: T) { lock.lock(); value = v; lock.unlock() }
    func get() -> T { lock.lock(); defer { lock.unlock() }; return value }
}
