import Foundation

/// Settings of one HTTP/2 client connection (and of every connection of a pool).
public struct HTTP2ClientConfiguration: Sendable {
    /// `https://host[:port]` (port defaults to 443). `http://host[:port]` (port default 80)
    /// selects cleartext HTTP/2 with prior knowledge (RFC 9113 §3.3), meant for tests only.
    /// Any path in the URL is ignored: requests carry their own `:path`.
    public var baseURL: URL
    /// Optional PEM bundle of CA certificates trusted in addition to the system store
    /// (`LIVERELAY_EXTRA_CA_FILE`), e.g. the local sandbox's CA.
    public var extraCAFile: String?
    /// Limit for TCP connect + TLS handshake + the peer's first SETTINGS frame, in seconds.
    public var connectTimeoutSeconds: Double
    /// Limit for one request from `send` until the full response, in seconds (includes any wait
    /// for a free stream slot).
    public var requestTimeoutSeconds: Double
    /// Idle time in seconds after which a PING (RFC 9113 §6.7) is sent; a PING not acknowledged
    /// within another interval marks the connection lost. 0 disables keepalive.
    public var pingIntervalSeconds: Double
    /// Largest response body buffered per stream, bytes (default 64 KiB, enough for any APNs or
    /// FCM answer): a longer body resets the stream and fails the request `.possiblyProcessed`
    /// (docs/security.md "Provider credentials").
    public var maxResponseBodyBytes = 65_536
    /// The first stream id a new connection uses (odd, ≥ 1; default 1). Tests set it near the
    /// HTTP/2 limit of 2^31 − 1 to reach a connection's last stream id quickly.
    var firstStreamID: Int32 = 1

    /// Creates a configuration; see the properties for units and meaning.
    public init(
        baseURL: URL, extraCAFile: String? = nil, connectTimeoutSeconds: Double = 10,
        requestTimeoutSeconds: Double = 30, pingIntervalSeconds: Double = 60
    ) {
        self.baseURL = baseURL
        self.extraCAFile = extraCAFile
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.requestTimeoutSeconds = requestTimeoutSeconds
        self.pingIntervalSeconds = pingIntervalSeconds
    }

    /// Host, port and TLS flag parsed from `baseURL`.
    func endpoint() throws(HTTP2Failure) -> (host: String, port: Int, tls: Bool) {
        guard let scheme = baseURL.scheme?.lowercased(), scheme == "https" || scheme == "http",
            var host = baseURL.host, !host.isEmpty
        else { throw .notProcessed(reason: "base URL must be https://host[:port]") }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let tls = scheme == "https"
        return (host, baseURL.port ?? (tls ? 443 : 80), tls)
    }
}
