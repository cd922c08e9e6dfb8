import Foundation
import HTTPServer
import JSON
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
    /// The variable naming the listener address.
    static let variable = "LIVERELAY_METRICS_LISTEN"

    /// `(host, port)` from `LIVERELAY_METRICS_LISTEN`, nil when unset or empty.
    /// - Throws: `ConfigurationError` (one line naming the variable) for anything but `host:port`
    ///   with a port in 0…65535.
    static func listenAddress(_ env: [String: String] = ProcessInfo.processInfo.environment) throws -> (host: String, port: Int)? {
        guard let v = env[variable], !v.isEmpty else { return nil }
        guard let colon = v.lastIndex(of: ":"), let port = Int(v[v.index(after: colon)...]), (0...65535).contains(port) else {
            throw ConfigurationError(problems: ["\(variable) must be host:port (e.g. 127.0.0.1:9464), got \(v.debugDescription)"])
        }
        var host = String(v[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host.isEmpty ? "0.0.0.0" : host, port)
    }

    /// A router with the three endpoints over `metrics`, `pool` and `migrator`.
    static func router(metrics: MetricsRegistry, pool: PostgresPool, migrator: Migrator, log: Logger) -> Router {
        let r = Router()
        r.add("GET", "/healthz") { _ in .json(200, ["status": "ok"]) }
        r.add("GET", "/readyz") { _ in readiness(pool: pool, migrator: migrator, log: log) }
        r.add("GET", "/metrics") { _ in
            .text(200, metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        return r
    }

    /// 200 when the database answers and every migration file is applied; 503 otherwise.
    static func readiness(pool: PostgresPool, migrator: Migrator, log: Logger) -> HTTPResponse {
        do {
            _ = try pool.withConnection { c in try c.query("SELECT 1 AS one") }
        } catch {
            log.warning("readyz: database unreachable", ["error": .string("\(error)")])
            return .json(503, ["status": "not_ready", "reason": "database unreachable"])
        }
        do {
            let pending = try migrator.pending(pool: pool)
            if !pending.isEmpty {
                return .json(503, ["status": "not_ready", "reason": "migrations pending", "pending": .array(pending.map(JSONValue.string))])
            }
        } catch {
            return .json(503, ["status": "not_ready", "reason": "migrations unreadable"])
        }
        return .json(200, ["status": "ready"])
    }

    /// Starts the listener when `LIVERELAY_METRICS_LISTEN` is set (2 threads; requests are
    /// counted in `metrics` like the API's); returns it (to shut down), or nil when unset.
    /// - Throws: `ConfigurationError` for a bad address, the server's error when it cannot bind.
    static func start(metrics: MetricsRegistry, pool: PostgresPool, migrator: Migrator, log: Logger,
                      env: [String: String] = ProcessInfo.processInfo.environment) throws -> HTTPServer? {
        guard let (host, port) = try listenAddress(env) else { return nil }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: host, port: port, threads: 2),
                                router: router(metrics: metrics, pool: pool, migrator: migrator, log: log), metrics: metrics,
                                log: { _ in })
        try server.start()
        log.info("metrics listening", ["address": .string("http://\(host.contains(":") ? "[\(host)]" : host):\(server.port)"),
                                       "paths": ["/metrics", "/healthz", "/readyz"]])
        return server
    }

    /// `liverelay_db_pool_connections{state}`: the pool's open/idle/in-use/waiting/max counts.
    static func registerPoolGauge(_ metrics: MetricsRegistry, _ pool: PostgresPool) {
        metrics.gauge("liverelay_db_pool_connections", help: "PostgreSQL pool connections by state", labels: ["state"]) {
            let s = pool.stats
            return [(["open"], Double(s.open)), (["idle"], Double(s.idle)), (["in_use"], Double(s.inUse)),
                    (["waiting"], Double(s.waiting)), (["max"], Double(s.maxConnections))]
        }
    }
}
