import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres

/// docs/endpoints.md "Service" endpoints (no credential, no tenant data) and capabilities.
enum ServiceHandlers {
    static func register(_ r: Router, _ ctx: APIContext, defaultExpirationSeconds: Int) {
        r.add("GET", "/healthz") { _ in .json(200, ["status": "ok"]) }
        r.add("GET", "/readyz") { req in readyz(ctx, req) }
        r.add("GET", "/metrics") { _ in
            .text(200, ctx.metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        let caps = Capabilities.document(
            defaultExpirationSeconds: defaultExpirationSeconds, limits: ctx.limits,
            retentionDays: ctx.retentionDays, priorityBudgets: ctx.priorityBudgets)
        r.add("GET", "/v1/remote-updates/capabilities") { req in
            try Endpoint.run(ctx, req) {
                _ = try ctx.auth.authenticate(req)  // any valid credential
                return .json(200, caps)
            }
        }
    }

    /// `/readyz` on the API port: `Readiness.response` over this API's pool and migrator.
    static func readyz(_ ctx: APIContext, _ req: HTTPRequest) -> HTTPResponse {
        Readiness.response(pool: ctx.db.pool, migrator: ctx.migrator, log: ctx.log)
    }
}

/// `GET /readyz`, the same on the API port and on a worker's metrics listener
/// (docs/operations.md "Processes", docs/security.md "Input bounds").
public enum Readiness {
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

/// Builds the router with every endpoint of the API.
public enum APIRoutes {
    /// Registers all routes on a new router.
    public static func router(_ ctx: APIContext, defaultExpirationSeconds: Int) -> Router {
        let r = Router()
        ServiceHandlers.register(r, ctx, defaultExpirationSeconds: defaultExpirationSeconds)
        OperatorHandlers.register(r, ctx)
        MasterKeyHandlers.register(r, ctx)
        SenderKeyHandlers.register(r, ctx)
        InstallationHandlers.register(r, ctx)
        LifecycleHandlers.register(r, ctx)
        TargetReadHandlers.register(r, ctx)
        UsageDailyHandlers.register(r, ctx)
        DeviceTargetHandlers.register(r, ctx)
        DeviceHandlers.register(r, ctx)
        ProviderCredentialHandlers.register(r, ctx)
        WebhookHandlers.register(r, ctx)
        ChannelHandlers.register(r, ctx)
        ConsoleHandlers.register(r)
        return r
    }
}
