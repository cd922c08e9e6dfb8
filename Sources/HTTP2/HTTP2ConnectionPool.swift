import Foundation
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// Several `HTTP2Connection`s to one origin with one configuration, e.g. one APNs
/// (team, key, environment) — docs/providers.md: a connection carries one credential only.
///
/// Opens connections on demand: a request goes to the usable connection with the fewest
/// queued + open requests; a new connection is opened (on a short-lived opener thread, so no
/// caller waits for a handshake) when every usable one is at its peer's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` and fewer than `maxConnections` exist; requests arriving
/// meanwhile wait for it in the pool (FIFO) or, when the limit is reached, queue on the least
/// loaded connection. Unusable connections (GOAWAY received, lost) are dropped from the pool;
/// they finish their open streams on their own. The pool never resends a request by itself:
/// whether a failure is retried is the caller's decision (`HTTP2Failure`, docs/write-semantics.md).
///
/// Thread-safe (`@unchecked Sendable`: the connection list is behind a `Locked`). `submit`
/// never blocks; `send` blocks its caller like `HTTP2Connection.send`.
public final class HTTP2ConnectionPool: @unchecked Sendable {
    private struct Waiting {
        let request: HTTP2Request
        let onWritten: (@Sendable () -> Void)?
        let completion: @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void
    }
    private struct State {
        var connections: [HTTP2Connection] = []
        var opening = 0
        var closed = false
        /// Requests waiting for a connection being opened.
        var waiting: [Waiting] = []
    }

    /// The configuration every connection uses.
    public let configuration: HTTP2ClientConfiguration
    /// Upper bound on simultaneously open connections (≥ 1).
    public let maxConnections: Int
    private let state = Locked(State())

    /// Creates an empty pool; nothing connects until the first request.
    /// - Parameter maxConnections: connections opened at most at once (clamped to ≥ 1).
    public init(configuration: HTTP2ClientConfiguration, maxConnections: Int = 4) {
        self.configuration = configuration
        self.maxConnections = max(1, maxConnections)
    }

    /// Sends `request` on a pooled connection, opening one if needed (see the type), and blocks
    /// until the response or a failure (a thin wrapper over `submit`).
    /// - Throws: `HTTP2Failure` from connecting (`.tls`, `.notProcessed`) or from the
    ///   connection; `.notProcessed` once the pool is closed.
    public func send(_ request: HTTP2Request) throws -> HTTP2Response {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<HTTP2Response, HTTP2Failure>?>(nil)
        submit(request) { r in
            result.withLock { $0 = r }
            done.signal()
        }
        let backstop = configuration.connectTimeoutSeconds + configuration.requestTimeoutSeconds + 10
        if done.wait(timeout: .now() + backstop) == .timedOut {
            throw HTTP2Failure.possiblyProcessed(reason: "connection I/O thread did not answer in time")
        }
        return try result.withLock { $0! }.get()
    }

    /// Sends `request` without blocking (see the type and `HTTP2Connection.submit`):
    /// `completion` is called exactly once — with a connect failure (`.tls`, `.notProcessed`),
    /// `.notProcessed` once the pool is closed, or the connection's result. `onWritten` is
    /// called once the request's HEADERS are written to the socket. Both may run on an I/O or
    /// opener thread: keep them short.
    public func submit(
        _ request: HTTP2Request, onWritten: (@Sendable () -> Void)? = nil,
        completion: @escaping @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void
    ) {
        enum Choice {
            case use(HTTP2Connection)
            case open, wait, closed
        }
        let choice = state.withLock { s -> Choice in
            if s.closed { return .closed }
            s.connections.removeAll { !$0.isUsable }
            let best = s.connections.min { $0.load < $1.load }
            if let best, best.load < best.maxConcurrentStreams { return .use(best) }
            if s.connections.count + s.opening < maxConnections {
                s.opening += 1
                s.waiting.append(Waiting(request: request, onWritten: onWritten, completion: completion))
                return .open
            }
            if s.opening > 0 && (best == nil || !s.waiting.isEmpty) {
                s.waiting.append(Waiting(request: request, onWritten: onWritten, completion: completion))
                return .wait
            }
            if let best { return .use(best) }
            return .closed
        }
        switch choice {
        case .use(let connection):
            connection.submit(request, onWritten: onWritten, completion: completion)
        case .open:
            let t = Thread { [self] in open() }
            t.name = "HTTP2ConnectionPool opener"
            t.start()
        case .wait:
            break
        case .closed:
            completion(.failure(.notProcessed(reason: "connection pool is closed")))
        }
    }

    /// Number of usable pooled connections (for tests and metrics).
    public var connectionCount: Int { state.withLock { $0.connections.filter(\.isUsable).count } }

    /// Requests queued or in flight on the pool's connections plus those waiting for a
    /// connection (for metrics).
    public var load: Int { state.withLock { s in s.waiting.count + s.connections.reduce(0) { $0 + $1.load } } }

    /// Closes every pooled connection (see `HTTP2Connection.close()`); requests waiting for a
    /// connection and later requests fail `.notProcessed`.
    public func close() {
        let (connections, waiting) = state.withLock { s -> ([HTTP2Connection], [Waiting]) in
            s.closed = true
            defer { s.connections.removeAll(); s.waiting.removeAll() }
            return (s.connections, s.waiting)
        }
        for w in waiting { w.completion(.failure(.notProcessed(reason: "connection pool is closed"))) }
        for connection in connections { connection.close() }
    }

    /// Opener thread: connects, then hands the waiting requests to the new connection (or, on
    /// failure, to another usable connection, or fails them with the connect error when no
    /// other connection is usable or being opened).
    private func open() {
        let result: Result<HTTP2Connection, HTTP2Failure>
        do { result = .success(try HTTP2Connection(configuration: configuration)) } catch let f as HTTP2Failure { result = .failure(f) } catch {
            result = .failure(.notProcessed(reason: "\(error)"))
        }
        enum Next {
            case run(HTTP2Connection, [Waiting])
            case fail(HTTP2Failure, [Waiting])
            case closeIt(HTTP2Connection)
            case wait
        }
        let next = state.withLock { s -> Next in
            s.opening -= 1
            switch result {
            case .success(let c):
                if s.closed { return .closeIt(c) }
                s.connections.append(c)
                defer { s.waiting.removeAll() }
                return .run(c, s.waiting)
            case .failure(let f):
                s.connections.removeAll { !$0.isUsable }
                if let best = s.connections.min(by: { $0.load < $1.load }) { defer { s.waiting.removeAll() }; return .run(best, s.waiting) }
                if s.opening > 0 { return .wait }
                defer { s.waiting.removeAll() }
                return .fail(f, s.waiting)
            }
        }
        switch next {
        case .run(let c, let list):
            for w in list { c.submit(w.request, onWritten: w.onWritten, completion: w.completion) }
        case .closeIt(let c):
            c.close()
        case .fail(let f, let list):
            for w in list { w.completion(.failure(f)) }
        case .wait:
            break  // another opener will hand them over
        }
    }
}
