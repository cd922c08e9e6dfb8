import Foundation
import Crypto
import Delivery
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
    static func run(config: Configuration, log: Logger) throws {
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let dispatchConfig = dispatcherConfiguration(config)
        let pool = try rt.openDatabase(poolSize: min(config.databasePoolSize, 8))
        let db = config.database(pool)
        let metrics = MetricsRegistry()
        OpsEndpoints.registerPoolGauge(metrics, pool)
        let maintenance = MaintenanceService(
            db: db, log: log.with(["component": "maintenance"]), metrics: metrics,
            interval: config.process.gcIntervalSeconds, retentionDays: config.retentionDays)
        maintenance.start()
        let push = try makePushSender(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
        let dispatcher = Dispatcher(
            db: db, conninfo: rt.conninfo, sender: push.sender,
            configuration: dispatchConfig, metrics: metrics, log: log)
        dispatcher.start()
        let channelWorker = makeChannelWorker(config: config, db: db, conninfo: rt.conninfo, sender: push.sender, metrics: metrics, log: log)
        channelWorker.start()
        let webhooks = config.webhookThreads > 0 ? try makeWebhookWorker(config: config, db: db, kek: rt.kek, metrics: metrics, log: log) : nil
        webhooks?.start()
        // After every component registered its metrics, so the first scrape sees them all.
        let ops = try OpsEndpoints.start(
            metrics: metrics, pool: pool, migrator: rt.migrator, log: log.with(["component": "metrics"]),
            listen: config.process.metricsListen)
        log.info("worker running", ["metrics": .string(ops == nil ? "off" : "on")])
        let signal = ServeCommand.waitForTermination()
        log.info("shutting down", ["signal": .string(signal)])
        maintenance.stop()
        channelWorker.stop(timeoutSeconds: 10)
        dispatcher.stop(timeoutSeconds: 20)
        webhooks?.stop(timeoutSeconds: 15)
        push.stop()
        db.flushNotifications()
        ops?.shutdown(drainTimeoutSeconds: 2)
        pool.close()
        log.info("stopped")
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
