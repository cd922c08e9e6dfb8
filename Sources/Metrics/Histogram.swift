import Locking

/// A Prometheus histogram family: per combination of label values, cumulative bucket counts,
/// the sum and the count of observations. Created by
/// `MetricsRegistry.histogram(_:help:labels:buckets:)`.
///
/// Thread safety: `@unchecked Sendable` because the series sit behind a `Locked`; `observe` may
/// be called from any thread.
public final class Histogram: @unchecked Sendable {
    struct Series {
        var counts: [UInt64]  // per finite bucket, non-cumulative
        var sum: Double = 0
        var count: UInt64 = 0
    }

    let name: String
    let help: String
    let labelNames: [String]
    /// Finite upper bounds, ascending, without duplicates (+Inf is implicit).
    let bounds: [Double]
    private let series = Locked<[[String]: Series]>([:])

    init(name: String, help: String, labelNames: [String], buckets: [Double]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.bounds = Array(Set(buckets.filter { $0.isFinite })).sorted()
    }

    /// Records one observation `value` (in the histogram's unit, e.g. seconds) for these label
    /// values (one per label name). NaN and a wrong number of label values are ignored.
    public func observe(_ labelValues: [String], _ value: Double) {
        guard labelValues.count == labelNames.count, !value.isNaN else { return }
        let index = bounds.firstIndex(where: { value <= $0 })
        let bucketCount = bounds.count
        series.withLock { all in
            var s = all[labelValues] ?? Series(counts: Array(repeating: 0, count: bucketCount))
            if let index { s.counts[index] += 1 }
            s.sum += value
            s.count += 1
            all[labelValues] = s
        }
    }

    /// Number of observations of one series (0 when none); for tests.
    public func count(_ labelValues: [String]) -> UInt64 {
        series.withLock { $0[labelValues]?.count ?? 0 }
    }

    func render(into out: inout String) {
        let snapshot = series.withLock { Array($0) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        for (values, s) in snapshot {
            let labels = zip(labelNames, values).map { ($0, $1) }
            var cumulative: UInt64 = 0
            for (i, bound) in bounds.enumerated() {
                cumulative += s.counts[i]
                PrometheusText.sample(
                    into: &out, name: name + "_bucket",
                    labels: labels + [("le", PrometheusText.format(bound))], value: Double(cumulative))
            }
            PrometheusText.sample(into: &out, name: name + "_bucket", labels: labels + [("le", "+Inf")], value: Double(s.count))
            PrometheusText.sample(into: &out, name: name + "_sum", labels: labels, value: s.sum)
            PrometheusText.sample(into: &out, name: name + "_count", labels: labels, value: Double(s.count))
        }
    }
}
