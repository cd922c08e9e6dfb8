/// Handles one routed request. Runs synchronously on a libmicrohttpd pool thread, so blocking
/// I/O (a pooled PostgreSQL connection, a long poll) is fine but occupies that thread.
/// A thrown `HTTPError` becomes its docs/http-conventions.md envelope; anything else thrown becomes
/// 500 `INTERNAL` "internal error" (with the request id) and is logged, never sent.
public typealias HTTPHandler = @Sendable (HTTPRequest) throws -> HTTPResponse

/// Listening and limit settings of an `HTTPServer`. Defaults suit a single-node deployment.
public struct HTTPServerConfiguration: Sendable {
    /// IPv4 address or host name to bind (`"127.0.0.1"`, `"0.0.0.0"`, `"localhost"`).
    public var host: String = "127.0.0.1"
    /// TCP port; 0 binds an ephemeral port (read it back from `HTTPServer.port`).
    public var port: Int = 8080
    /// Worker threads running handlers; this bounds concurrent handlers (and concurrent
    /// blocking database calls). Connections themselves cost no thread: one libmicrohttpd
    /// polling thread on epoll owns every socket (docs/http-limits.md).
    public var threads: Int = 8
    /// Most worker threads: when every worker is busy (blocking handlers) and a request
    /// waits, another worker starts, up to this many (at least `threads`).
    public var maxThreads: Int = 64
    /// Largest accepted request body in bytes (docs/http-conventions.md: 64 KiB). One byte more →
    /// 413 `PAYLOAD_TOO_LARGE` with `details.limit` and `details.actual`.
    public var maxBodyBytes: Int = 65_536
    /// Seconds a connection may stay idle (no bytes either way) before it is closed.
    public var connectionTimeoutSeconds: Int = 30
    /// Whether access-log lines (level `info`) are written at all. False skips building them
    /// (a JSON object and a timestamp per request), for a log sink that drops `info` anyway.
    public var accessLog: Bool = true
    /// Open connections served; a request arriving on a connection beyond it is answered
    /// `503 SERVICE_UNAVAILABLE` (`Retry-After: 1`, `Connection: close`), and libmicrohttpd
    /// closes new connections at once 64 beyond it. Lowered at start to what the process's
    /// descriptor limit (RLIMIT_NOFILE, raised to its hard limit) allows.
    public var maxConnections: Int = 16_384
    /// Open connections per client address (libmicrohttpd closes further ones at once);
    /// 0 = no per-address cap.
    public var maxConnectionsPerAddress: Int = 256
    /// Seconds allowed to read one request, request line through the last body byte, from
    /// its first byte, however slowly bytes arrive (slowloris); past it the connection is
    /// closed. ≤ 0 disables the deadline.
    public var requestReadTimeoutSeconds: Double = 10
    /// Requests waiting for a free worker; beyond it a request is answered
    /// `503 SERVICE_UNAVAILABLE` with `Retry-After: 1`.
    public var maxQueuedRequests: Int = 1_024

    /// Creates a configuration; every parameter defaults to the property's documented default.
    public init(
        host: String = "127.0.0.1", port: Int = 8080, threads: Int = 8, maxThreads: Int = 64,
        maxBodyBytes: Int = 65_536, connectionTimeoutSeconds: Int = 30, maxConnections: Int = 16_384,
        maxConnectionsPerAddress: Int = 256, requestReadTimeoutSeconds: Double = 10, maxQueuedRequests: Int = 1_024
    ) {
        self.maxThreads = maxThreads
        self.maxConnections = maxConnections
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
        self.requestReadTimeoutSeconds = requestReadTimeoutSeconds
        self.maxQueuedRequests = maxQueuedRequests
        self.host = host
        self.port = port
        self.threads = threads
        self.maxBodyBytes = maxBodyBytes
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
    }
}
