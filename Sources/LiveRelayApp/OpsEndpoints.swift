import Foundation
import HTTPServer
import JSON
import LiveRelayAPI
import Logging
import Metrics
import Postgres

/// `GET /metrics`, `/healthz` and `/readyz` for processes that serve no API (`liverelay worker`),
/// and for an extra operations listener of `serve`/`api`, on `LIVERELAY_METRICS_LISTEN`
/// (`host:port`; port 0 picks a free one, logged as "metrics listening"). Unset: no listener
/// (the worker's default; `serve` and `api` always answer these paths on the API port).
///
/// - `/healthz` → `200 {"status": "ok"}` while the process runs;
/// - `/readyz` → `200 {"status": "ready"}` when PostgreSQL answers and no migration is pending,
///   else `503 {"status": "not_ready", "reason": …}` (no tenant data, no internals);
/// - `/metrics` → the process's registry in the Prometheus text format 0.0.4.
///
/// Metric names and meanings: docs/operations.md ("Metrics").
enum OpsEndpoints {
    /// A router with the three endpoints over `metrics`, `pool` and `migrator`.
    static func router(metrics: MetricsRegistry, pool: PostgresPool, migrator: Migrator, log: Logger) -> Router {
        let r = Router()
        let readiness = Readiness.Cache()
        r.add("GET", "/healthz") { _ in .json(200, ["status": "ok"]) }
        r.add("GET", "/readyz") { _ in readiness.response { Readiness.response(pool: pool, migrator: migrator, log: log) } }
        r.add("GET", "/metrics") { _ in
            .text(200, metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        return r
    }

    /// Starts the listener on `listen` (`LIVERELAY_METRICS_LISTEN`, `ProcessSettings.metricsListen`;
    /// 2 threads; requests are counted in `metrics` like the API's); returns it (to shut down),
    /// or nil when `listen` is nil.
    /// - Throws: the server's error when it cannot bind.
    static func start(
        metrics: MetricsRegistry, pool: PostgresPool, migrator: Migrator, log: Logger,
        listen: (host: String, port: Int)?
    ) throws -> HTTPServer? {
        guard let (host, port) = listen else { return nil }
        let server = HTTPServer(
            configuration: HTTPServerConfiguration(host: host, port: port, threads: 2),
            router: router(metrics: metrics, pool: pool, migrator: migrator, log: log), metrics: metrics,
            log: { _ in })
        try server.start()
        log.info(
            "metrics listening",
            [
                "address": .string("http://\(host.contains(":") ? "[\(host)]" : host):\(server.port)"),
                "paths": ["/metrics", "/healthz", "/readyz"]
            ])
        return server
    }

    /// `liverelay_db_pool_connections{state}`: the pool's open/idle/in-use/waiting/max counts.
    static func registerPoolGauge(_ metrics: MetricsRegistry, _ pool: PostgresPool) {
        metrics.gauge("liverelay_db_pool_connections", help: "PostgreSQL pool connections by state", labels: ["state"]) {
            let s = pool.stats
            return [
                (["open"], Double(s.open)), (["idle"], Double(s.idle)), (["in_use"], Double(s.inUse)),
                (["waiting"], Double(s.waiting)), (["max"], Double(s.maxConnections))
            ]
        }
    }
}
