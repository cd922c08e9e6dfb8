/// Bounded label cardinality for per-tenant queue gauges (docs/delivery.md "Metrics"): the
/// `top` tenants with the deepest queues keep their own `tenant` label; everyone else is folded
/// into one series labelled `other` (depths summed, the oldest due age is the maximum). So a
/// deployment with 100,000 tenants still exports at most `top + 1` series per gauge.
public enum TenantQueueGauges {
    /// One tenant's figures: queued operations and the age in seconds of its oldest due head.
    public struct Entry: Sendable, Equatable {
        public let tenant: String
        public let depth: Double
        public let oldestDueSeconds: Double
        public init(tenant: String, depth: Double, oldestDueSeconds: Double) {
            self.tenant = tenant; self.depth = depth; self.oldestDueSeconds = oldestDueSeconds
        }
    }

    /// The label value of the folded series.
    public static let otherLabel = "other"

    /// Folds `entries` to at most `top + 1` entries: the `top` deepest (ties: older due age
    /// first, then tenant id), then `other` when anything is left. `top` < 0 counts as 0.
    public static func fold(_ entries: [Entry], top: Int) -> [Entry] {
        let sorted = entries.sorted {
            ($0.depth, $0.oldestDueSeconds, $1.tenant) > ($1.depth, $1.oldestDueSeconds, $0.tenant)
        }
        let keep = max(0, top)
        var out = Array(sorted.prefix(keep))
        let rest = sorted.dropFirst(keep)
        if !rest.isEmpty {
            out.append(
                Entry(
                    tenant: otherLabel, depth: rest.reduce(0) { $0 + $1.depth },
                    oldestDueSeconds: rest.map(\.oldestDueSeconds).max() ?? 0))
        }
        return out
    }
}
