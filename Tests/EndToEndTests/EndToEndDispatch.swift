import Foundation
import Delivery
import LiveRelayStore
import Logging
import Metrics

/// Starts the dispatcher for the harness the way `serve` does (production settings; woken by
/// NOTIFY after each commit), with the harness's provider sender.
enum EndToEndDispatch {
    static func start(
        db: Database, conninfo: String, sender: ProviderSender, metrics: MetricsRegistry, log: Logger,
        clock: @escaping @Sendable () -> Date = Date.init
    ) -> (() -> Void)? {
        var configuration = DispatcherConfiguration(workerId: "e2e-\(UUID().uuidString.prefix(8))", senderThreads: 4)
        // deploy/bench/fanout's A/B knob: operations per claim and apply (`LIVERELAY_DISPATCH_BATCH` of `serve`).
        if let b = ProcessInfo.processInfo.environment["BENCH_DISPATCH_BATCH"].flatMap(Int.init), b > 0 {
            configuration.claimBatchSize = b; configuration.applyBatchSize = b; configuration.claimPerTenant = b
        }
        configuration.clock = clock
        let d = Dispatcher(db: db, conninfo: conninfo, sender: sender, configuration: configuration, metrics: metrics, log: log)
        d.start()
        let provider = APNsChannelProvider(client: sender.channels)
        var channelConfiguration = ChannelWorkerConfiguration(workerId: "e2e-channels-\(UUID().uuidString.prefix(8))")
        // deploy/bench/fanout's A/B knob: members per fan-out batch.
        if let b = ProcessInfo.processInfo.environment["BENCH_FANOUT_BATCH"].flatMap(Int.init), b > 0 { channelConfiguration.fanoutBatchSize = b }
        let channels = ChannelWorker(
            db: db, conninfo: conninfo, sender: provider, manager: provider, configuration: channelConfiguration, metrics: metrics, log: log)
        channels.start()
        return {
            channels.stop(timeoutSeconds: 10); d.stop(timeoutSeconds: 10)
        }
    }
}
