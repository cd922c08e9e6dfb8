import Foundation
import Delivery
import LiveRelayStore
import Logging
import Metrics

/// Starts the dispatcher for the harness; nil while this build has none.
enum EndToEndDispatch {
    static func start(db: Database, conninfo: String, sender: ProviderSender, metrics: MetricsRegistry, log: Logger) -> (() -> Void)? {
        nil
    }
}
