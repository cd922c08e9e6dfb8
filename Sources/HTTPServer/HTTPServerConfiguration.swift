/// Handles one routed request. Runs synchronously on a libmicrohttpd pool thread, so blocking
/// I/O (a pooled PostgreSQL connection, a long poll) is fine but occupies that thread.
/// A thrown `HTTPError` becomes its SPEC §3 envelope; anything else thrown becomes
/// 500 `INTERNAL` "internal error" (with the request id) and is logged, never sent.
public typealias HTTPHandler = @Sendable (HTTPRequest) throws -> HTTPResponse

/// Listening and limit settings of an `HTTPServer`. Defaults suit a single-node deployment.
public struct HTTPServerConfiguration: Sendable {
    /// IPv4 address or host name to bind (`"127.0.0.1"`, `"0.0.0.0"`, `"localhost"`).
    public var host: String = "127.0.0.1"
    /// TCP port; 0 binds an ephemeral port (read it back from `HTTPServer.port`).
    public var port: Int = 8080
    /// Worker threads in libmicrohttpd's pool; handlers run on them, so this bounds concurrent
    /// handlers (and concurrent blocking database calls).
    public var threads: Int = 8
    /// Largest accepted request body in bytes (SPEC §3: 64 KiB). One byte more →
    /// 413 `PAYLOAD_TOO_LARGE` with `details.limit` and `details.actual`.
    public var maxBodyBytes: Int = 65_536
    /// Seconds a connection may stay idle (no bytes either way) before it is closed.
    public var connectionTimeoutSeconds: Int = 30
    /// Whether access-log lines (level `info`) are written at all. False skips building them
    /// (a JSON object and a timestamp per request), for a log sink that drops `info` anyway.
    public var accessLog: Bool = true

    /// Creates a configuration; every parameter defaults to the property's documented default.
    public init(host: String = "127.0.0.1", port: Int = 8080, threads: Int = 8,
                maxBodyBytes: Int = 65_536, connectionTimeoutSeconds: Int = 30) {
        self.host = host
        self.port = port
        self.threads = threads
        self.maxBodyBytes = maxBodyBytes
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
    }
}
