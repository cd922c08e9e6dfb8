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
/// Extra settings (environment):
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | `LIVERELAY_DISPATCH_THREADS` | sender threads (blocking provider calls) | 16 |
/// | `LIVERELAY_DISPATCH_BATCH` | operations per claim / apply transaction | 64 |
/// | `LIVERELAY_DISPATCH_LEASE_SECONDS` | lease length (heartbeat every third) | 30 |
/// | `LIVERELAY_WORKER_ID` | lease owner name | `<host>-<pid>-<random>` |
/// | `LIVERELAY_METRICS_LISTEN` | `host:port` of `/metrics`, `/healthz`, `/readyz` | unset: none |
enum WorkerCommand {
    static func run(config: Configuration, log: Logger) throws {
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let dispatchConfig = try dispatcherConfiguration(config)
        _ = try OpsEndpoints.listenAddress()  // a bad address is reported before anything starts
        let pool = try rt.openDatabase(poolSize: min(config.databasePoolSize, 8))
        let db = config.database(pool)
        let metrics = MetricsRegistry()
        OpsEndpoints.registerPoolGauge(metrics, pool)
        let maintenance = MaintenanceService(db: db, log: log.with(["component": "maintenance"]), metrics: metrics, retentionDays: config.retentionDays)
        maintenance.start()
        let push = try makePushSender(config: config, db: db, conninfo: rt.conninfo, kek: rt.kek, metrics: metrics, log: log)
        let dispatcher = Dispatcher(db: db, conninfo: rt.conninfo, sender: push.sender,
                                    configuration: dispatchConfig, metrics: metrics, log: log)
        dispatcher.start()
        let webhooks = config.webhookThreads > 0 ? try makeWebhookWorker(config: config, db: db, kek: rt.kek, metrics: metrics, log: log) : nil
        webhooks?.start()
        // After every component registered its metrics, so the first scrape sees them all.
        let ops = try OpsEndpoints.start(metrics: metrics, pool: pool, migrator: rt.migrator, log: log.with(["component": "metrics"]))
        log.info("worker running", ["metrics": .string(ops == nil ? "off" : "on")])
        let signal = ServeCommand.waitForTermination()
        log.info("shutting down", ["signal": .string(signal)])
        maintenance.stop()
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
    static func makeWebhookWorker(config: Configuration, db: Database, kek: [UInt8], metrics: MetricsRegistry, log: Logger,
                                  env: [String: String] = ProcessInfo.processInfo.environment) throws -> WebhookWorker {
        let client = try WebhookHTTPClient(configuration: WebhookHTTPConfiguration(allowPrivate: config.webhookAllowPrivate,
                                                                                     extraCAFile: config.extraCAFile))
        let id = env["LIVERELAY_WORKER_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? DispatcherConfiguration.defaultWorkerId()
        let wc = WebhookWorkerConfiguration(workerId: id, concurrency: config.webhookThreads)
        return WebhookWorker(db: db, kek: try AESGCM(key: kek), client: client, configuration: wc, metrics: metrics, log: log)
    }

    /// The dispatcher settings from `config` and the `LIVERELAY_DISPATCH_*` variables.
    static func dispatcherConfiguration(_ config: Configuration,
                                        env: [String: String] = ProcessInfo.processInfo.environment) throws -> DispatcherConfiguration {
        var problems: [String] = []
        func int(_ k: String, _ def: Int, _ range: ClosedRange<Int>) -> Int {
            guard let s = env[k], !s.isEmpty else { return def }
            guard let v = Int(s), range.contains(v) else {
                problems.append("\(k) must be an integer in \(range.lowerBound)...\(range.upperBound), got \(s.debugDescription)")
                return def
            }
            return v
        }
        let threads = int("LIVERELAY_DISPATCH_THREADS", 4, 1...512)
        let batch = int("LIVERELAY_DISPATCH_BATCH", 64, 1...1000)
        let lease = int("LIVERELAY_DISPATCH_LEASE_SECONDS", 30, 3...3600)
        let inFlight = int("LIVERELAY_DISPATCH_MAX_IN_FLIGHT", 4096, 1...100_000)
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
        let id = env["LIVERELAY_WORKER_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? DispatcherConfiguration.defaultWorkerId()
        return DispatcherConfiguration(workerId: id, senderThreads: threads, claimBatchSize: batch, applyBatchSize: batch,
                                       leaseSeconds: Double(lease), defaultExpirationSeconds: config.defaultExpirationSeconds,
                                       eventDrivenMaxOutstanding: inFlight)
    }

    /// `LIVERELAY_DISPATCH_CONNECTIONS`: HTTP/2 connections per (team, key, environment) pool
    /// (1…64, default 4; docs/delivery.md "Sending").
    static func dispatchConnections(env: [String: String] = ProcessInfo.processInfo.environment) throws -> Int {
        guard let s = env["LIVERELAY_DISPATCH_CONNECTIONS"], !s.isEmpty else { return 4 }
        guard let v = Int(s), (1...64).contains(v) else {
            throw ConfigurationError(problems: ["LIVERELAY_DISPATCH_CONNECTIONS must be an integer in 1...64, got \(s.debugDescription)"])
        }
        return v
    }

    /// The APNs/FCM client for this process. Until the provider clients are wired in here,
    /// every push fails visibly with `PROVIDER_CREDENTIALS_INVALID` (`UnconfiguredPushSender`).
    /// The APNs/FCM sender (docs/providers.md) over the tenants' stored provider credentials, with the
    /// provider URLs and extra CA of `config`. Returns the sender and a closure that stops it
    /// (closes its HTTP/2 pools and flushes credential health).
    /// `conninfo`: where the credential cache LISTENs for provider-credential changes (a PUT or
    /// DELETE on any node reaches this process within a second).
    static func makePushSender(config: Configuration, db: Database, conninfo: String, kek: [UInt8], metrics: MetricsRegistry,
                               log: Logger) throws -> (sender: any PushSender, stop: () -> Void) {
        let endpoints = ProviderEndpoints(apnsProductionURL: URL(string: config.apnsProductionURL)!,
                                          apnsSandboxURL: URL(string: config.apnsSandboxURL)!,
                                          fcmURL: URL(string: config.fcmURL)!, extraCAFile: config.extraCAFile,
                                          maxConnectionsPerPool: try dispatchConnections())
        let (sender, credentials) = ProviderSender.make(db: db, kek: try AESGCM(key: kek), endpoints: endpoints, metrics: metrics,
                                                        log: log.with(["component": "provider"]))
        credentials.startChangeListener(conninfo: conninfo)
        return (sender, { sender.close(); credentials.stop() })
    }
}
