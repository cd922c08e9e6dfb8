import Foundation

/// A bounded pool of blocking `PostgresConnection`s shared by many threads.
///
/// Connections open lazily, up to `maxConnections`. A caller gets one connection for the
/// duration of `withConnection`/`transaction`; idle connections are probed (non-blocking read)
/// before reuse, and a connection that is broken afterwards (server restarted, backend
/// terminated, protocol stuck) is closed and never returned, so the next caller gets a fresh one.
///
/// `@unchecked Sendable`: the mutable state (`idle`, counters, `closed`) is only touched while
/// holding `condition` (an `NSCondition`, which also lets waiters sleep with a deadline), and each
/// non-Sendable `PostgresConnection` is owned by exactly one thread at a time — the pool while
/// idle, then the single borrower until it is released.
public final class PostgresPool: @unchecked Sendable {
    /// The libpq connection string every connection uses.
    public let conninfo: String
    /// Upper bound on open connections.
    public let maxConnections: Int
    /// Longest wait, in seconds, for a free connection before `.poolTimeout`.
    public let acquireTimeoutSeconds: Double
    /// libpq `connect_timeout`, in seconds, for each new connection.
    public let connectTimeoutSeconds: Int

    private let condition = NSCondition()
    private var idle: [PostgresConnection] = []
    private var open = 0
    private var inUse = 0
    private var waiting = 0
    private var closed = false

    /// Creates the pool; no connection is opened until first use.
    ///
    /// - Parameters:
    ///   - conninfo: libpq connection string (key/value or URI).
    ///   - maxConnections: upper bound on open connections (at least 1).
    ///   - acquireTimeoutSeconds: longest wait in seconds for a free connection.
    ///   - connectTimeoutSeconds: libpq `connect_timeout` in seconds for each new connection.
    public init(
        conninfo: String, maxConnections: Int = 10, acquireTimeoutSeconds: Double = 5,
        connectTimeoutSeconds: Int = 5
    ) {
        self.conninfo = conninfo
        self.maxConnections = max(1, maxConnections)
        self.acquireTimeoutSeconds = max(0, acquireTimeoutSeconds)
        self.connectTimeoutSeconds = connectTimeoutSeconds
    }

    deinit {
        for c in idle { c.close() }
    }

    /// Lends one connection to `body` and takes it back afterwards (also when `body` throws).
    /// An open transaction left by `body` is rolled back; a broken connection is discarded.
    ///
    /// - Throws: `PostgresError` `.poolTimeout` after waiting `acquireTimeoutSeconds` for a free
    ///   connection, `.connection` when a new connection cannot be opened (fails fast while the
    ///   server is down), `.closed` after `close()`; otherwise whatever `body` throws.
    @discardableResult
    public func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try acquire()
        defer { release(connection) }
        return try body(connection)
    }

    /// Current counters (taken under the lock).
    public var stats: PoolStats {
        condition.lock()
        defer { condition.unlock() }
        return PoolStats(maxConnections: maxConnections, open: open, idle: idle.count, inUse: inUse, waiting: waiting)
    }

    /// Closes idle connections and refuses new acquisitions (`.closed`, also for current waiters).
    /// Connections in use are closed when returned. Idempotent.
    public func close() {
        condition.lock()
        closed = true
        let toClose = idle
        idle.removeAll()
        open -= toClose.count
        condition.broadcast()
        condition.unlock()
        for c in toClose { c.close() }
    }

    // MARK: - Acquire and release

    private func acquire() throws -> PostgresConnection {
        let deadline = Date(timeIntervalSinceNow: acquireTimeoutSeconds)
        condition.lock()
        while true {
            if closed {
                condition.unlock()
                throw PostgresError(kind: .closed, message: "connection pool is closed")
            }
            if let connection = idle.popLast() {
                inUse += 1
                condition.unlock()
                if connection.probeIdle() { return connection }
                connection.close()
                condition.lock()
                inUse -= 1
                open -= 1
                continue
            }
            if open < maxConnections {
                open += 1
                inUse += 1
                condition.unlock()
                do {
                    return try PostgresConnection(conninfo, connectTimeoutSeconds: connectTimeoutSeconds)
                } catch {
                    condition.lock()
                    open -= 1
                    inUse -= 1
                    condition.signal()
                    condition.unlock()
                    throw error
                }
            }
            waiting += 1
            let signalled = condition.wait(until: deadline)
            waiting -= 1
            if !signalled && Date() >= deadline && idle.isEmpty && open >= maxConnections && !closed {
                condition.unlock()
                throw PostgresError(
                    kind: .poolTimeout,
                    message: "no free connection within \(acquireTimeoutSeconds) s (max \(maxConnections))")
            }
        }
    }

    private func release(_ connection: PostgresConnection) {
        connection.deferred = nil
        connection.deferredKeys = []
        let reusable = connection.resetForPool()
        condition.lock()
        inUse -= 1
        let keep = reusable && !closed
        if keep {
            idle.append(connection)
        } else {
            open -= 1
        }
        condition.signal()
        condition.unlock()
        if !keep { connection.close() }
    }
}
