import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Locking
import Postgres

/// docs/endpoints.md "Service" endpoints (no credential, no tenant data) and capabilities.
enum ServiceHandlers {
    /// `GET /healthz`: `200 {"status": "ok"}` while the process answers at all.
    static func healthz(_ ctx: APIContext, _ req: HTTPRequest) -> HTTPResponse {
        .json(200, ["status": "ok"])
    }

    /// `GET /metrics`: the registry in the Prometheus text format (docs/operations.md "Metrics").
    static func metrics(_ ctx: APIContext, _ req: HTTPRequest) -> HTTPResponse {
        .text(200, ctx.metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    /// `GET /v1/remote-updates/capabilities`: `document` (`Capabilities.document`) for any valid
    /// credential.
    /// - Throws: what `Authenticator.authenticate` throws (`401 UNAUTHENTICATED`, …).
    static func capabilities(_ document: JSONValue) -> APIHandler {
        { ctx, req in
            _ = try ctx.auth.authenticate(req)  // any valid credential
            return .json(200, document)
        }
    }

    /// `/readyz` on the API port: `Readiness.response` over this API's pool and migrator,
    /// through the context's `Readiness.Cache`.
    static func readyz(_ ctx: APIContext, _ req: HTTPRequest) -> HTTPResponse {
        ctx.readiness.response { Readiness.response(pool: ctx.db.pool, migrator: ctx.migrator, log: ctx.log) }
    }
}

/// `GET /readyz`, the same on the API port and on a worker's metrics listener
/// (docs/operations.md "Processes", docs/security.md "Input bounds").
public enum Readiness {
    /// The last answer of `/readyz`, reused for `ttlSeconds` (default 1 s), and one check at a
    /// time: `/readyz` needs no credential, and each check takes pooled connections and runs
    /// three queries, so a flood of anonymous probes would otherwise compete with tenants for
    /// the pool (docs/security.md "Input bounds"). Concurrent callers of an expired answer wait
    /// for the one check in progress and share its answer. Thread-safe.
    public final class Cache: Sendable {
        /// Seconds an answer is reused.
        public let ttlSeconds: Double
        private let last = Locked<(at: Date, response: HTTPResponse)?>(nil)
        private let checking = NSLock()  // single flight: one check at a time
        private let clock: @Sendable () -> Date

        /// - Parameters: `ttlSeconds` (seconds, ≥ 0); `clock` (tests).
        public init(ttlSeconds: Double = 1, clock: @escaping @Sendable () -> Date = Date.init) {
            self.ttlSeconds = max(0, ttlSeconds)
            self.clock = clock
        }

        /// The cached answer while it is younger than `ttlSeconds`, else `check()`'s (which is
        /// then cached).
        public func response(_ check: () -> HTTPResponse) -> HTTPResponse {
            if let fresh = fresh() { return fresh }
            checking.lock()
            defer { checking.unlock() }
            if let fresh = fresh() { return fresh }  // the check another caller ran while this one waited
            let r = check()
            let at = clock()
            last.withLock { $0 = (at, r) }
            return r
        }

        private func fresh() -> HTTPResponse? {
            let now = clock()
            return last.withLock { l in l.flatMap { now.timeIntervalSince($0.at) < ttlSeconds ? $0.response : nil } }
        }
    }

    /// `200 {"status": "ready"}` when the database answers and every migration file is applied
    /// (`migrator` nil: the migration check is skipped); otherwise `503 {"status": "not_ready",
    /// "reason": …}` with a reason in operator words that names no tenant, file, SQL or server
    /// message — those go to `log` as a warning.
    public static func response(pool: PostgresPool, migrator: Migrator?, log: Logger) -> HTTPResponse {
        do {
            _ = try pool.withConnection { c in try c.query("SELECT 1 AS one") }
        } catch {
            log.warning("readyz: database unreachable", ["error": .string("\(error)")])
            return .json(503, ["status": "not_ready", "reason": "database unreachable"])
        }
        if let m = migrator {
            do {
                let pending = try m.pending(pool: pool)
                if !pending.isEmpty {
                    return .json(503, ["status": "not_ready", "reason": "migrations pending", "pending": .array(pending.map(JSONValue.string))])
                }
            } catch {
                // The error text may name files and SQL: it goes to the log, not to this
                // unauthenticated response.
                log.warning("readyz: cannot compare migrations", ["error": .string("\(error)")])
                return .json(503, ["status": "not_ready", "reason": .string(ServiceHandlers.readyzReason(error))])
            }
        }
        return .json(200, ["status": "ready"])
    }
}

extension ServiceHandlers {
    /// What `/readyz` says about a failed migration check: what is wrong, in words an
    /// operator can act on, without file names, SQL or server messages (those are logged).
    static func readyzReason(_ error: Error) -> String {
        switch error as? MigrationError {
        case .modified?: return "an applied migration differs from this build's migration files"
        case .missing?: return "the database has a migration this build does not know (a newer schema?)"
        default: return "migrations could not be checked"
        }
    }
}
