/// A snapshot of a `PostgresPool`'s counters, for metrics and `/readyz`.
public struct PoolStats: Sendable, Equatable {
    /// The configured upper bound on open connections.
    public let maxConnections: Int
    /// Connections open or being opened (idle + in use).
    public let open: Int
    /// Open connections waiting in the pool.
    public let idle: Int
    /// Connections lent to callers (including ones being opened for them).
    public let inUse: Int
    /// Callers blocked waiting for a connection.
    public let waiting: Int

    /// A snapshot; public so callers can build one in tests.
    public init(maxConnections: Int, open: Int, idle: Int, inUse: Int, waiting: Int) {
        self.maxConnections = maxConnections
        self.open = open
        self.idle = idle
        self.inUse = inUse
        self.waiting = waiting
    }
}
