import Locking

/// A Prometheus counter family: one monotonically increasing total per combination of label
/// values. Created by `MetricsRegistry.counter(_:help:labels:)`.
///
/// Thread safety: `@unchecked Sendable` because the series dictionary sits behind a `Locked`;
/// `increment` may be called from any thread.
public final class Counter: @unchecked Sendable {
    let name: String
    let help: String
    let labelNames: [String]
    private let series = Locked<[[String]: Double]>([:])

    init(name: String, help: String, labelNames: [String]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
    }

    /// Adds `by` (default 1) to the series with these label values (one per label name, in
    /// registration order; the series starts at 0). Negative, NaN or infinite amounts and a
    /// wrong number of label values are ignored (a counter never decreases, and a metrics call
    /// must never take the process down).
    public func increment(_ labelValues: [String], by amount: Double = 1) {
        guard labelValues.count == labelNames.count, amount >= 0, amount.isFinite else { return }
        series.withLock { $0[labelValues, default: 0] += amount }
    }

    /// The current value of one series (0 when never incremented); for tests and gauges.
    public func value(_ labelValues: [String]) -> Double {
        series.withLock { $0[labelValues] ?? 0 }
    }

    func snapshot() -> [([String], Double)] {
        series.withLock { Array($0) }
            .map { ($0.key, $0.value) }
            .sorted { $0.0.lexicographicallyPrecedes($1.0) }
    }
}
