import Foundation
import Crypto
import Delivery
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// `liverelay worker`: the dispatcher (and its maintenance: lease rescue, expiry, lifetime
/// sweep) without the API, until SIGTERM/SIGINT (SPEC §9: any number of workers share one
/// PostgreSQL). `serve` runs the same dispatcher next to the API.
///
/// Extra settings (environment):
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | `LIVERELAY_DISPATCH_THREADS` | sender threads (blocking provider calls) | 16 |
/// | `LIVERELAY_DISPATCH_BATCH` | operations per claim / apply transaction | 64 |
/// | `LIVERELAY_DISPATCH_LEASE_SECONDS` | lease length (heartbeat every third) | 30 |
/// | `LIVERELAY_WORKER_ID` | lease owner name | `<host>-<pid>-<random>` |
enum WorkerCommand {
    static func run(config: Configuration, log: Logger) throws {
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let dispatchConfig = try dispatcherConfiguration(config)
        let pool = try rt.openDatabase(poolSize: min(config.databasePoolSize, 8))
        let db = Database(pool: pool)
        let metrics = MetricsRegistry()
        let push = try makePushSender(config: config, db: db, kek: rt.kek, metrics: metrics, log: log)
        let dispatcher = Dispatcher(db: db, conninfo: rt.conninfo, sender: push.sender,
                                    configuration: dispatchConfig, metrics: metrics, log: log)
        dispatcher.start()
        let signal = ServeCommand.waitForTermination()
        log.info("shutting down", ["signal": .string(signal)])
        dispatcher.stop(timeoutSeconds: 20)
        push.stop()
        db.flushNotifications()
        pool.close()
        log.info("stopped")
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
        let threads = int("LIVERELAY_DISPATCH_THREADS", 16, 1...512)
        let batch = int("LIVERELAY_DISPATCH_BATCH", 64, 1...1000)
        let lease = int("LIVERELAY_DISPATCH_LEASE_SECONDS", 30, 3...3600)
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
        let id = env["LIVERELAY_WORKER_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? DispatcherConfiguration.defaultWorkerId()
        return DispatcherConfiguration(workerId: id, senderThreads: threads, claimBatchSize: batch, applyBatchSize: batch,
                                       leaseSeconds: Double(lease), defaultExpirationSeconds: config.defaultExpirationSeconds)
    }

    /// The APNs/FCM client for this process. Until the provider clients are wired in here,
    /// every push fails visibly with `PROVIDER_CREDENTIALS_INVALID` (`UnconfiguredPushSender`).
    /// The APNs/FCM sender (SPEC §8) over the tenants' stored provider credentials, with the
    /// provider URLs and extra CA of `config`. Returns the sender and a closure that stops it
    /// (closes its HTTP/2 pools and flushes credential health).
    static func makePushSender(config: Configuration, db: Database, kek: [UInt8], metrics: MetricsRegistry,
                               log: Logger) throws -> (sender: any PushSender, stop: () -> Void) {
        let endpoints = ProviderEndpoints(apnsProductionURL: URL(string: config.apnsProductionURL)!,
                                          apnsSandboxURL: URL(string: config.apnsSandboxURL)!,
                                          fcmURL: URL(string: config.fcmURL)!, extraCAFile: config.extraCAFile)
        let (sender, credentials) = ProviderSender.make(db: db, kek: try AESGCM(key: kek), endpoints: endpoints, metrics: metrics,
                                                        log: log.with(["component": "provider"]))
        return (sender, { sender.close(); credentials.stop() })
    }
}
