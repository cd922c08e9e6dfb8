import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Several `HTTP2Connection`s to one origin with one configuration, e.g. one APNs
/// (team, key, environment) — SPEC §8: a connection carries one credential only.
///
/// Opens connections on demand: a request goes to the usable connection with the fewest
/// queued + open requests; a new connection is opened when every usable one is at its
/// peer's `SETTINGS_MAX_CONCURRENT_STREAMS` and fewer than `maxConnections` exist. Unusable
/// connections (GOAWAY received, lost) are dropped from the pool; they finish their open
/// streams on their own. The pool never resends a request by itself: whether a failure is
/// retried is the caller's decision (`HTTP2Failure`, SPEC §5).
///
/// Thread-safe (`@unchecked Sendable`: the connection list is behind a `Mutex`); `send`
/// blocks its caller like `HTTP2Connection.send`.
public final class HTTP2ConnectionPool: @unchecked Sendable {
    private struct State {
        var connections: [HTTP2Connection] = []
        var opening = 0
        var closed = false
    }

    /// The configuration every connection uses.
    public let configuration: HTTP2ClientConfiguration
    /// Upper bound on simultaneously open connections (≥ 1).
    public let maxConnections: Int
    private let state = Mutex(State())

    /// Creates an empty pool; nothing connects until the first `send`.
    /// - Parameter maxConnections: connections opened at most at once (clamped to ≥ 1).
    public init(configuration: HTTP2ClientConfiguration, maxConnections: Int = 4) {
        self.configuration = configuration
        self.maxConnections = max(1, maxConnections)
    }

    /// Sends `request` on a pooled connection, opening one if needed (see the type).
    /// - Throws: `HTTP2Failure` from connecting (`.tls`, `.notProcessed`) or from the
    ///   connection's `send`; `.notProcessed` once the pool is closed.
    public func send(_ request: HTTP2Request) throws -> HTTP2Response {
        try connection().send(request)
    }

    /// Number of usable pooled connections (for tests and metrics).
    public var connectionCount: Int { state.withLock { $0.connections.filter(\.isUsable).count } }

    /// Closes every pooled connection (see `HTTP2Connection.close()`); later sends fail
    /// `.notProcessed`.
    public func close() {
        let connections = state.withLock { s -> [HTTP2Connection] in
            s.closed = true
            defer { s.connections.removeAll() }
            return s.connections
        }
        for connection in connections { connection.close() }
    }

    /// Picks or opens a connection. Opening happens outside the lock.
    private func connection() throws -> HTTP2Connection {
        enum Choice { case use(HTTP2Connection), open, closed, wait }
        let giveUp = Socket.now() + configuration.connectTimeoutSeconds
        var choice = Choice.wait
        while case .wait = choice {
            choice = pick()
            if case .wait = choice {
                if Socket.now() > giveUp { throw HTTP2Failure.notProcessed(reason: "no pooled connection became available") }
                usleep(10_000)
            }
        }
        func pick() -> Choice { state.withLock { s -> Choice in
            if s.closed { return .closed }
            s.connections.removeAll { !$0.isUsable }
            let best = s.connections.min { $0.load < $1.load }
            if let best, best.load < best.maxConcurrentStreams { return .use(best) }
            if s.connections.count + s.opening < maxConnections {
                s.opening += 1
                return .open
            }
            if let best { return .use(best) }
            return .wait  // every slot is being opened by other callers
        } }
        switch choice {
        case .use(let connection):
            return connection
        case .closed, .wait:
            throw HTTP2Failure.notProcessed(reason: "connection pool is closed")
        case .open:
            let opened: HTTP2Connection
            do {
                opened = try HTTP2Connection(configuration: configuration)
            } catch {
                state.withLock { $0.opening -= 1 }
                throw error
            }
            let keep = state.withLock { s -> Bool in
                s.opening -= 1
                if s.closed { return false }
                s.connections.append(opened)
                return true
            }
            if !keep {
                opened.close()
                throw HTTP2Failure.notProcessed(reason: "connection pool is closed")
            }
            return opened
        }
    }
}
