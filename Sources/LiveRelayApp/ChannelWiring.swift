import Foundation
import Crypto
import Delivery
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics

/// Composition of the channel pieces (docs/channels.md): the API's APNs channel management and
/// the dispatcher process's `ChannelWorker` (fan-out expander, broadcaster, finaliser).
extension WorkerCommand {
    /// APNs channel management for an API node: its own credential source (invalidated by
    /// NOTIFY like the dispatcher's) and `APNsChannelClient` on the configured channel hosts.
    static func makeChannelManager(
        config: Configuration, db: Database, conninfo: String, kek: [UInt8], metrics: MetricsRegistry,
        log: Logger
    ) throws -> (manager: any ChannelManaging, stop: () -> Void) {
        let source = DatabaseProviderCredentialSource(db: db, kek: try AESGCM(key: kek), log: log.with(["component": "channels"]))
        source.start()
        source.startChangeListener(conninfo: conninfo)
        let client = APNsChannelClient(source: source, endpoints: config.providerEndpoints(maxConnectionsPerPool: 1), metrics: metrics)
        return (
            APNsChannelProvider(client: client),
            {
                client.close(); source.stop()
            }
        )
    }

    /// The channel worker of `serve` and `worker`, sending broadcasts and deleting channels
    /// through the push sender's `APNsChannelClient` (one JWT cache for both).
    static func makeChannelWorker(
        config: Configuration, db: Database, conninfo: String, sender: any PushSender, metrics: MetricsRegistry,
        log: Logger
    ) -> ChannelWorker {
        let provider: any ChannelManaging & BroadcastSending =
            (sender as? ProviderSender).map { APNsChannelProvider(client: $0.channels) }
            ?? UnconfiguredChannelManager()
        let id = config.process.workerId ?? DispatcherConfiguration.defaultWorkerId()  // LIVERELAY_WORKER_ID, validated by Configuration
        let wc = ChannelWorkerConfiguration(workerId: id + "-channels", defaultExpirationSeconds: config.defaultExpirationSeconds)
        return ChannelWorker(db: db, conninfo: conninfo, sender: provider, manager: provider, configuration: wc, metrics: metrics, log: log)
    }
}
