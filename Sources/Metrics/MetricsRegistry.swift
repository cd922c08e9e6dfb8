import Locking

/// A small, thread-safe registry of metrics rendered in the Prometheus text exposition
/// format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/), served by
/// `GET /metrics` (docs/endpoints.md "Service").
///
/// Thread safety: `@unchecked Sendable` because every piece of mutable state sits behind a
/// `Locked` (module `Locking`) — the registry's list of families here, and each counter's or
/// histogram's series in its own lock — so registration, recording and `render()` may run
/// concurrently from any thread. Gauge sample closures run during `render()` outside every
/// registry lock, so they may take their own locks (pool gauges, queue depth).
///
/// Registering a name twice returns the metric registered first when the kind and label names
/// match (so two components can share one family); a name reused with another kind or other
/// label names, or an invalid metric/label name, is a programming error and traps.
public final class MetricsRegistry: @unchecked Sendable {
    enum Family {
        case counter(Counter)
        case gauge(Gauge)
        case histogram(Histogram)

        var name: String {
            switch self {
            case .counter(let c): return c.name
            case .gauge(let g): return g.name
            case .histogram(let h): return h.name
            }
        }
    }

    struct Gauge {
        let name: String
        let help: String
        let labels: [String]
        let sample: @Sendable () -> [([String], Double)]
    }

    private let families = Locked<[Family]>([])

    /// Creates an empty registry.
    public init() {}

    /// Registers (or returns the already registered) counter `name`: a monotonically increasing
    /// total, rendered as `# TYPE name counter`. By convention the name ends in `_total`.
    /// - Parameters:
    ///   - help: one-line description for the `# HELP` line.
    ///   - labels: label names; every `increment` passes one value per name, in this order.
    public func counter(_ name: String, help: String, labels: [String]) -> Counter {
        Self.validate(name: name, labels: labels)
        return families.withLock { families in
            if let existing = families.first(where: { $0.name == name }) {
                guard case .counter(let c) = existing, c.labelNames == labels else {
                    preconditionFailure("metric \(name) already registered with another kind or labels")
                }
                return c
            }
            let c = Counter(name: name, help: help, labelNames: labels)
            families.append(.counter(c))
            return c
        }
    }

    /// Registers a gauge whose series are computed at render time by `sample` (for values that
    /// already live elsewhere: pool sizes, queue depth). `sample` returns `(labelValues, value)`
    /// pairs, one value per label name each; pairs with the wrong number of label values are
    /// skipped. Registering an existing gauge name replaces nothing and is ignored.
    public func gauge(
        _ name: String, help: String, labels: [String] = [],
        sample: @escaping @Sendable () -> [([String], Double)]
    ) {
        Self.validate(name: name, labels: labels)
        families.withLock { families in
            if let existing = families.first(where: { $0.name == name }) {
                guard case .gauge = existing else {
                    preconditionFailure("metric \(name) already registered with another kind")
                }
                return
            }
            families.append(.gauge(Gauge(name: name, help: help, labels: labels, sample: sample)))
        }
    }

    /// Registers (or returns the already registered) histogram `name` with cumulative buckets.
    /// - Parameters:
    ///   - labels: label names (`le` is reserved and traps).
    ///   - buckets: upper bounds in the unit of the observed values (seconds for durations, by
    ///     Prometheus convention); sorted and de-duplicated here; `+Inf` is always added.
    public func histogram(_ name: String, help: String, labels: [String], buckets: [Double]) -> Histogram {
        Self.validate(name: name, labels: labels)
        precondition(!labels.contains("le"), "histogram label name le is reserved")
        return families.withLock { families in
            if let existing = families.first(where: { $0.name == name }) {
                guard case .histogram(let h) = existing, h.labelNames == labels else {
                    preconditionFailure("metric \(name) already registered with another kind or labels")
                }
                return h
            }
            let h = Histogram(name: name, help: help, labelNames: labels, buckets: buckets)
            families.append(.histogram(h))
            return h
        }
    }

    /// The whole registry in text format 0.0.4 (serve with
    /// `Content-Type: text/plain; version=0.0.4; charset=utf-8`): per family `# HELP` and
    /// `# TYPE` lines, then one sample line per series, series sorted by label values;
    /// histograms as `_bucket{…,le="…"}` (cumulative, ending with `le="+Inf"`), `_sum`,
    /// `_count`. Label values and help text are escaped as the format requires.
    public func render() -> String {
        let snapshot = families.withLock { $0 }
        var out = ""
        for family in snapshot {
            switch family {
            case .counter(let c):
                PrometheusText.header(into: &out, name: c.name, help: c.help, type: "counter")
                for (values, value) in c.snapshot() {
                    PrometheusText.sample(into: &out, name: c.name, labels: zip(c.labelNames, values).map { ($0, $1) }, value: value)
                }
            case .gauge(let g):
                PrometheusText.header(into: &out, name: g.name, help: g.help, type: "gauge")
                let samples = g.sample()
                    .filter { $0.0.count == g.labels.count }
                    .sorted { $0.0.lexicographicallyPrecedes($1.0) }
                for (values, value) in samples {
                    PrometheusText.sample(into: &out, name: g.name, labels: zip(g.labels, values).map { ($0, $1) }, value: value)
                }
            case .histogram(let h):
                PrometheusText.header(into: &out, name: h.name, help: h.help, type: "histogram")
                h.render(into: &out)
            }
        }
        return out
    }

    static func validate(name: String, labels: [String]) {
        precondition(PrometheusText.isValidMetricName(name), "invalid metric name \(name)")
        for label in labels {
            precondition(PrometheusText.isValidLabelName(label), "invalid label name \(label) for \(name)")
        }
        precondition(Set(labels).count == labels.count, "duplicate label names for \(name)")
    }
}
