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
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let pool = try rt.openDatabase(poolSize: config.databasePoolSize)
        let db = config.database(pool)
        let metrics = MetricsRegistry()
        OpsEndpoints.registerPoolGauge(metrics, pool)
        let channels = try WorkerCommand.makeChannelManager(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
        var httpConfig = HTTPServerConfiguration(host: config.listenHost, port: config.listenPort, threads: config.httpThreads)
        httpConfig.accessLog = log.minimum <= .info  // access lines are `info`: not built when they would be dropped
        let api = try APIStack(db: db, conninfo: rt.conninfo, log: log, http: httpConfig, metrics: metrics, serverLog: { line in log.raw(line) }) {
            auth, events in
            APIContext(
                db: db, auth: auth, kek: try AESGCM(key: rt.kek), log: log, metrics: metrics, migrator: rt.migrator,
                events: events, defaultExpirationSeconds: config.defaultExpirationSeconds,
                webhookAllowPrivate: config.webhookAllowPrivate,
                limits: config.limits, retentionDays: config.retentionDays, fcmURL: config.fcmURL,
                channels: channels.manager, priorityBudgets: config.priorityBudgets)
        }
        let maintenance =
            log.context["component"] == "api"
            ? nil
            : MaintenanceService(
                db: db, log: log.with(["component": "maintenance"]), metrics: metrics,
                interval: config.process.gcIntervalSeconds, retentionDays: config.retentionDays)
        maintenance?.start()
        var dispatcher: Dispatcher?
        var stopSender: (() -> Void)?
        var webhooks: WebhookWorker?
        var channelWorker: ChannelWorker?
        if withDispatcher {
            let push = try WorkerCommand.makePushSender(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
            let d = Dispatcher(
                db: db, conninfo: rt.conninfo, sender: push.sender,
                configuration: WorkerCommand.dispatcherConfiguration(config), metrics: metrics, log: log)
            d.start()
            dispatcher = d
            channelWorker = WorkerCommand.makeChannelWorker(
                config: config, db: db, conninfo: rt.conninfo, sender: push.sender, metrics: metrics, log: log)
            channelWorker?.start()
            stopSender = push.stop
            if config.webhookThreads > 0 {
                webhooks = try WorkerCommand.makeWebhookWorker(config: config, db: db, kek: rt.kek, metrics: metrics, log: log)
                webhooks?.start()
            }
        }
        // /metrics, /healthz, /readyz are on the API port; LIVERELAY_METRICS_LISTEN adds a second
        // listener, started once every component registered its metrics.
        let ops = try OpsEndpoints.start(
            metrics: metrics, pool: pool, migrator: rt.migrator, log: log.with(["component": "metrics"]),
            listen: config.process.metricsListen)
        log.info(
            "liverelay listening",
            [
                "address": .string("http://\(config.listenHost):\(api.server.port)"),
                "database": .string(config.databaseURL == nil ? "embedded" : "DATABASE_URL")
            ])
        let signal = waitForTermination()
        log.info("shutting down", ["signal": .string(signal)])
        maintenance?.stop()
        api.server.shutdown(drainTimeoutSeconds: 30)
        ops?.shutdown(drainTimeoutSeconds: 2)
        channelWorker?.stop(timeoutSeconds: 10)
        dispatcher?.stop(timeoutSeconds: 20)  // before the pool closes
        channels.stop()
        webhooks?.stop(timeoutSeconds: 15)
        stopSender?()
        api.auth.stop()
        api.events.stop()
        db.flushNotifications()
        pool.close()
        log.info("stopped")
    }

    /// Installs the SIGTERM/SIGINT handling of this process once. Commands call it before they
    /// start anything, so a signal that arrives while they start is kept, not lost — a process
    /// may inherit SIGTERM as ignored (SIG_IGN survives exec), and then a signal before the
    /// handler exists would vanish and the process never stop.
    static func prepareForTermination() { _ = terminationSignals }

    private static let terminationSignals = TerminationSignals()

    /// Blocks until SIGTERM or SIGINT (received since `prepareForTermination`, or from now);
    /// returns its name.
    static func waitForTermination() -> String {
        terminationSignals.wait()
    }
}

/// SIGTERM/SIGINT turned into a semaphore (Dispatch signal sources; the default actions are
/// replaced by SIG_IGN so the sources alone see them). `@unchecked Sendable`: every stored
/// property is immutable after `init`, and the semaphore and `LockedBox` are thread-safe.
final class TerminationSignals: @unchecked Sendable {
    private let sem = DispatchSemaphore(value: 0)
    private let got = LockedBox("")
    private var sources: [DispatchSourceSignal] = []

    init() {
        for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            Foundation.signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { [got, sem] in
                got.set(name); sem.signal()
            }
            s.resume()
            sources.append(s)
        }
    }

    /// Blocks until the first SIGTERM or SIGINT since `init`; returns its name.
    func wait() -> String {
        sem.wait()
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
