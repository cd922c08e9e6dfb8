import Foundation
import Crypto
import Delivery
import HTTPServer
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// `liverelay worker`: the dispatcher (and its maintenance: lease rescue, expiry, lifetime
/// sweep) without the API, until SIGTERM/SIGINT (docs/configuration.md: any number of workers share one
/// PostgreSQL). `serve` runs the same dispatcher next to the API. A worker also runs the
/// maintenance service (template-version GC, idempotency purge; safe on many workers at once:
/// each binding is decided under its row lock), so a deployment of `api` nodes and workers
/// needs no `serve`. With `LIVERELAY_METRICS_LISTEN` set it serves `/metrics`, `/healthz` and
/// `/readyz` there (`OpsEndpoints`; docs/operations.md "Metrics").
///
/// Its settings (`LIVERELAY_DISPATCH_*`, `LIVERELAY_WORKER_ID`, `LIVERELAY_GC_INTERVAL_SECONDS`,
/// `LIVERELAY_METRICS_LISTEN`) are read and validated with the rest by `Configuration.load`
/// (`ProcessSettings`).
enum WorkerCommand {
    /// Runs the worker until SIGTERM/SIGINT, then stops every service (each stop logged).
    /// - Throws: `ConfigurationError`, a migration error, or a start error (e.g. the metrics
    ///   address cannot be bound) after what had started was stopped.
    static func run(config: Configuration, log: Logger) throws {
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let pool = try rt.openDatabase(poolSize: min(config.databasePoolSize, 8))
        let db = config.database(pool)
        let metrics = MetricsRegistry()
        OpsEndpoints.registerPoolGauge(metrics, pool)
        // Made (metrics registered) before anything starts: the ops listener's first scrape sees them all.
        let maintenance = MaintenanceService(
            db: db, log: log.with(["component": "maintenance"]), metrics: metrics,
            interval: config.process.gcIntervalSeconds, retentionDays: config.retentionDays)
        let delivery = try deliveryServices(config: config, db: db, runtime: rt, metrics: metrics, log: log)
        let ops = OpsListenerService(config: config, metrics: metrics, pool: pool, runtime: rt, log: log)
        // Start order = reverse stop order, the stops as before this group existed: maintenance,
        // the channel worker (10 s), the dispatcher (20 s), the webhook worker (15 s), the push
        // sender, the ops listener (2 s; /healthz answers through the whole drain), the pool.
        // The ops listener now starts right after the pool instead of last (its /readyz reports
        // PostgreSQL and migrations, already applied; every metric is registered by then), and
        // stops just before the pool's queued NOTIFYs are flushed instead of just after.
        var services: [any Service] = [databaseService(db: db, pool: pool)]
        services.append(ops)
        services += delivery
        services.append(ClosureService("maintenance", start: maintenance.start, stop: maintenance.stop))
        try ServiceGroup(services, log: log).run {
            log.info("worker running", ["metrics": .string(ops.server == nil ? "off" : "on")])
        }
        log.info("stopped")
    }

    /// The ops listener as a service (`LIVERELAY_METRICS_LISTEN`: `/metrics`, `/healthz`,
    /// `/readyz` on a port of their own, docs/operations.md; nothing runs when it is unset).
    /// `server` is the listener once started; its stop drains for 2 s.
    final class OpsListenerService: Service {
        let name = "ops listener"
        private(set) var server: HTTPServer?
        private let open: () throws -> HTTPServer?

        init(config: Configuration, metrics: MetricsRegistry, pool: PostgresPool, runtime rt: Runtime, log: Logger) {
            open = {
                try OpsEndpoints.start(
                    metrics: metrics, pool: pool, migrator: rt.migrator, log: log.with(["component": "metrics"]),
                    listen: config.process.metricsListen)
            }
        }

        func start() throws { server = try open() }
        func stop() { server?.shutdown(drainTimeoutSeconds: 2) }
    }

    /// The pool as a service: open already (`Runtime.openDatabase`, before the components are
    /// made over it); its stop sends the NOTIFYs still queued by COMMITs
    /// (`Database.flushNotifications`, up to 5 s) and closes the pool. First in every group,
    /// so it stops last.
    static func databaseService(db: Database, pool: PostgresPool) -> any Service {
        ClosureService("database") {
            db.flushNotifications()
            pool.close()
        }
    }

    /// The delivery side of `serve` and `worker`, in start order: the push sender (running once
    /// made, its credential source with it), the webhook worker (when `LIVERELAY_WEBHOOK_THREADS`
    /// > 0), the dispatcher, the channel worker. Stopped in reverse: the channel worker (10 s)
    /// and the dispatcher (20 s) before the push sender they send through, the webhook worker
    /// (15 s) between. Each is made here, so its metrics are registered on return.
    /// - Throws: the push sender's or the webhook client's setup error (bad KEK, CA file).
    static func deliveryServices(
        config: Configuration, db: Database, runtime rt: Runtime, metrics: MetricsRegistry, log: Logger
    ) throws -> [any Service] {
        let push = try makePushSender(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
        let webhooks = config.webhookThreads > 0 ? try makeWebhookWorker(config: config, db: db, kek: rt.kek, metrics: metrics, log: log) : nil
        let dispatcher = Dispatcher(
            db: db, conninfo: rt.conninfo, sender: push.sender,
            configuration: dispatcherConfiguration(config), metrics: metrics, log: log)
        let channelWorker = makeChannelWorker(config: config, db: db, conninfo: rt.conninfo, sender: push.sender, metrics: metrics, log: log)
        var services: [any Service] = [ClosureService("push sender", stop: push.stop)]
        if let webhooks { services.append(ClosureService("webhook worker", start: webhooks.start) { webhooks.stop(timeoutSeconds: 15) }) }
        services.append(ClosureService("dispatcher", start: dispatcher.start) { dispatcher.stop(timeoutSeconds: 20) })
        services.append(ClosureService("channel worker", start: channelWorker.start) { channelWorker.stop(timeoutSeconds: 10) })
        return services
    }

    /// The webhook delivery worker of `serve` and `worker` (docs/webhooks.md "Delivery"): libcurl
    /// client trusting the system CAs plus `LIVERELAY_EXTRA_CA_FILE`, lease owner
    /// `LIVERELAY_WORKER_ID` (or a generated one), `LIVERELAY_WEBHOOK_THREADS` senders.
    static func makeWebhookWorker(config: Configuration, db: Database, kek: [UInt8], metrics: MetricsRegistry, log: Logger) throws -> WebhookWorker {
        let client = try WebhookHTTPClient(
            configuration: WebhookHTTPConfiguration(
                allowPrivate: config.webhookAllowPrivate,
                extraCAFile: config.extraCAFile))
        let id = config.process.workerId ?? DispatcherConfiguration.defaultWorkerId()
        let wc = WebhookWorkerConfiguration(workerId: id, concurrency: config.webhookThreads)
        return WebhookWorker(db: db, kek: try AESGCM(key: kek), client: client, configuration: wc, metrics: metrics, log: log)
    }

    /// The dispatcher settings from `config` (`ProcessSettings`: the `LIVERELAY_DISPATCH_*`
    /// variables and `LIVERELAY_WORKER_ID`, validated by `Configuration.load`).
    static func dispatcherConfiguration(_ config: Configuration) -> DispatcherConfiguration {
        let p = config.process
        return DispatcherConfiguration(
            workerId: p.workerId ?? DispatcherConfiguration.defaultWorkerId(), senderThreads: p.dispatchThreads,
            claimBatchSize: p.dispatchBatch, applyBatchSize: p.dispatchBatch,
            leaseSeconds: Double(p.dispatchLeaseSeconds), defaultExpirationSeconds: config.defaultExpirationSeconds,
            eventDrivenMaxOutstanding: p.dispatchMaxInFlight)
    }

    /// The APNs/FCM client for this process. Until the provider clients are wired in here,
    /// every push fails visibly with `PROVIDER_CREDENTIALS_INVALID` (`UnconfiguredPushSender`).
    /// The APNs/FCM sender (docs/providers.md) over the tenants' stored provider credentials, with the
    /// provider URLs and extra CA of `config`. Returns the sender and a closure that stops it
    /// (closes its HTTP/2 pools and flushes credential health).
    /// `conninfo`: where the credential cache LISTENs for provider-credential changes (a PUT or
    /// DELETE on any node reaches this process within a second).
    static func makePushSender(
        config: Configuration, db: Database, conninfo: String, kek: [UInt8], metrics: MetricsRegistry,
        log: Logger
    ) throws -> (sender: any PushSender, stop: () -> Void) {
        let endpoints = config.providerEndpoints(maxConnectionsPerPool: config.process.dispatchConnections)
        let (sender, credentials) = ProviderSender.make(
            db: db, kek: try AESGCM(key: kek), endpoints: endpoints, metrics: metrics,
            log: log.with(["component": "provider"]))
        credentials.startChangeListener(conninfo: conninfo)
        return (
            sender,
            {
                sender.close(); credentials.stop()
            }
        )
    }
}
