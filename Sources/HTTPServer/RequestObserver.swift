import Metrics

/// Records each finished request: one access-log line (built only when `accessLog` is on) and, when a registry is given,
/// `http_requests_total{route,method,status}` and
/// `http_request_duration_seconds{route,method}` (seconds).
struct RequestObserver: Sendable {
    /// Duration buckets in seconds.
    static let durationBuckets: [Double] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// Methods kept as metric label values; any other method is labelled "OTHER" so clients
    /// cannot create unbounded series.
    static let knownMethods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    let log: @Sendable (String) -> Void
    let accessLog: Bool
    let requests: Counter?
    let durations: Histogram?

    init(metrics: MetricsRegistry?, accessLog: Bool = true, log: @escaping @Sendable (String) -> Void) {
        self.log = log
        self.accessLog = accessLog
        requests = metrics?.counter(
            "http_requests_total", help: "HTTP requests answered, by route pattern, method and status.",
            labels: ["route", "method", "status"])
        durations = metrics?.histogram(
            "http_request_duration_seconds",
            help: "Time from request line to response queued, in seconds.",
            labels: ["route", "method"], buckets: Self.durationBuckets)
    }

    func record(
        requestId: String, method: String, route: String?, path: String, status: Int,
        durationSeconds: Double, bytesIn: Int, bytesOut: Int
    ) {
        if accessLog {
            log(
                AccessLog.request(
                    requestId: requestId, method: method, route: route, path: path, status: status,
                    durationSeconds: durationSeconds, bytesIn: bytesIn, bytesOut: bytesOut))
        }
        let routeLabel = route ?? "unmatched"
        let methodLabel = Self.knownMethods.contains(method) ? method : "OTHER"
        requests?.increment([routeLabel, methodLabel, String(status)])
        durations?.observe([routeLabel, methodLabel], durationSeconds)
    }
}
