import Foundation
import Crypto
import HTTPServer
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// The HTTP API as one unit, built the same way by `liverelay serve`/`api` and by the tests
/// (docs/architecture.md "Processes and their threads"): the `Authenticator` with its cache
/// invalidation listener (`liverelay_auth`), the `EventWaiter` with its listener
/// (`liverelay_events`), the `APIContext`, the routes and the `HTTPServer` — started in that
/// order, stopped in reverse by `stop`.
///
/// Not `Sendable`: owned by the thread that builds and stops it.
public final class APIStack {
    public let auth: Authenticator
    public let events: EventWaiter
    public let context: APIContext
    public let server: HTTPServer
    private let host: String

    /// Builds the stack and starts it: the two listeners connect to `conninfo`, then the server
    /// listens on `http`'s address (port 0: an ephemeral port, read back from `server.port`).
    /// - Parameters:
    ///   - log: the authenticator and the event waiter log under it with `component` `auth` / `events`.
    ///   - serverLog: where the HTTP server writes its raw lines (access log, errors).
    ///   - makeContext: the `APIContext` over the authenticator and event waiter made here (the
    ///     caller chooses the KEK, limits, clock …); its `defaultExpirationSeconds` also
    ///     configures the routes.
    /// - Throws: whatever `makeContext` throws, or the server's bind/listen error
    ///   (`HTTPServerError`); nothing is left running then.
    public init(
        db: Database, conninfo: String, log: Logger, http: HTTPServerConfiguration, metrics: MetricsRegistry,
        serverLog: @escaping @Sendable (String) -> Void,
        makeContext: (_ auth: Authenticator, _ events: EventWaiter) throws -> APIContext
    ) throws {
        host = http.host
        auth = Authenticator(db: db, log: log.with(["component": "auth"]))
        auth.startInvalidationListener(conninfo: conninfo)
        events = EventWaiter(log: log.with(["component": "events"]))
        events.start(conninfo: conninfo)
        do {
            context = try makeContext(auth, events)
            server = HTTPServer(
                configuration: http, router: APIRoutes.router(context, defaultExpirationSeconds: context.defaultExpirationSeconds),
                metrics: metrics, log: serverLog)
            try server.start()
        } catch {
            auth.stop()
            events.stop()
            throw error
        }
    }

    /// `http://<host>:<port>` of the running server.
    public var baseURL: String { "http://\(host):\(server.port)" }

    /// Drains the server (at most `drainTimeoutSeconds` for requests in flight), then stops the
    /// listeners.
    public func stop(drainTimeoutSeconds: Double) {
        server.shutdown(drainTimeoutSeconds: drainTimeoutSeconds)
        auth.stop()
        events.stop()
    }
}
