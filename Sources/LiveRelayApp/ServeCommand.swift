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

/// `liverelay serve` / `api`: the API server (`serve` adds the dispatcher, the channel and
/// webhook workers and maintenance) in one process until SIGTERM or SIGINT, then a graceful
/// drain in reverse start order (`ServiceGroup`; docs/architecture.md "Processes and their
/// threads").
enum ServeCommand {
    /// What a `serve`-family process runs besides the API, chosen by the command (never by a
    /// logger label).
    enum Role: Sendable {
        /// `liverelay api`: the API server alone (any number behind a load balancer; delivery and
        /// maintenance run in `worker`s).
        case api
        /// `liverelay serve`: the API plus the dispatcher, the channel worker, the webhook worker
        /// (when `LIVERELAY_WEBHOOK_THREADS` > 0) and the maintenance service.
        case serve

        /// Whether the dispatcher, the channel worker and the webhook worker run here.
        var runsDelivery: Bool { self == .serve }
        /// Whether the `MaintenanceService` runs here.
        var runsMaintenance: Bool { self == .serve }
    }

    /// Runs `role` until SIGTERM/SIGINT, then stops every service (each stop logged) and returns.
    /// - Throws: `ConfigurationError` (database role, KEK), a migration error, or a start error
    ///   (e.g. the API port cannot be bound) after what had started was stopped.
    static func run(config: Configuration, log: Logger, role: Role) throws {
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let pool = try rt.openDatabase(poolSize: config.databasePoolSize)
        let db = config.database(pool)
        let metrics = MetricsRegistry()
        OpsEndpoints.registerPoolGauge(metrics, pool)
        // Everything is made (and registers its metrics) before anything below starts, so the
        // ops listener's first scrape sees every metric.
        let channels = try WorkerCommand.makeChannelManager(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
        var delivery: [any Service] = []
        if role.runsDelivery {
            delivery = try WorkerCommand.deliveryServices(config: config, db: db, runtime: rt, metrics: metrics, log: log)
        }
        let maintenance =
            role.runsMaintenance
            ? MaintenanceService(
                db: db, log: log.with(["component": "maintenance"]), metrics: metrics,
                interval: config.process.gcIntervalSeconds, retentionDays: config.retentionDays)
            : nil
        var httpConfig = HTTPServerConfiguration(host: config.listenHost, port: config.listenPort, threads: config.httpThreads)
        httpConfig.accessLog = log.minimum <= .info  // access lines are `info`: not built when they would be dropped
        var api: APIStack?
        // Start order = reverse stop order. Stops: maintenance; the API (drains 30 s, then its
        // auth and event listeners) while the ops listener still answers /healthz and /metrics;
        // the ops listener (2 s); the API's channel manager; the channel worker (10 s) and the
        // dispatcher (20 s), before the push sender they send through; the webhook worker
        // (15 s); the push sender; the pool last (every service uses it). As before this group,
        // except two stops that depend on nothing they now pass: the auth and event listeners
        // stopped after the push sender, the channel manager between the dispatcher and the
        // webhook worker. For this order the starts moved: delivery before the API (was after),
        // maintenance last (was right after the API), the ops listener just before the API
        // server (was last; its /readyz reports PostgreSQL and migrations, not the API socket).
        var services: [any Service] = [WorkerCommand.databaseService(db: db, pool: pool)]
        services += delivery
        services.append(ClosureService("channel manager", stop: channels.stop))  // running since made; the API uses it
        services.append(WorkerCommand.OpsListenerService(config: config, metrics: metrics, pool: pool, runtime: rt, log: log))
        services.append(
            ClosureService(
                "api",
                start: {
                    api = try APIStack(
                        db: db, conninfo: rt.conninfo, log: log, http: httpConfig, metrics: metrics, serverLog: { line in log.raw(line) }
                    ) {
                        auth, events in
                        APIContext(
                            db: db, auth: auth, kek: try AESGCM(key: rt.kek), log: log, metrics: metrics, migrator: rt.migrator,
                            events: events, defaultExpirationSeconds: config.defaultExpirationSeconds,
                            webhookAllowPrivate: config.webhookAllowPrivate,
                            limits: config.limits, retentionDays: config.retentionDays, fcmURL: config.fcmURL,
                            channels: channels.manager, priorityBudgets: config.priorityBudgets)
                    }
                }, stop: { api?.stop(drainTimeoutSeconds: 30) }))
        if let maintenance { services.append(ClosureService("maintenance", start: maintenance.start, stop: maintenance.stop)) }
        try ServiceGroup(services, log: log).run {
            log.info(
                "liverelay listening",
                [
                    "address": .string("http://\(config.listenHost):\(api?.server.port ?? 0)"),
                    "database": .string(config.databaseURL == nil ? "embedded" : "DATABASE_URL")
                ])
        }
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
