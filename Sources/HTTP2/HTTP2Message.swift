/// What HTTP/2 requests and responses share: regular header fields in order (names lowercase
/// on the wire, RFC 9113 §8.2.1) and a header lookup over them.
public protocol HTTP2Message: Sendable {
    /// Regular header fields in order (no pseudo-headers).
    var headers: [(String, String)] { get }
}

extension HTTP2Message {
    /// Value of the first header whose name equals `name` ignoring ASCII case (field names are
    /// ASCII tokens, RFC 9110 §5.1), or nil. Compares bytes in place: the sandbox and the
    /// clients look up several headers per stream, and lowercasing copies of every name was
    /// ~2 % of the process's CPU in deploy/bench/fanout.
    public func header(_ name: String) -> String? {
        headers.first { HTTP2FieldName.equalIgnoringASCIICase($0.0, name) }?.1
    }
}

/// Field-name helpers shared by messages and the nghttp2 glue.
enum HTTP2FieldName {
    /// Whether `a` and `b` are equal once ASCII letters are lowercased (other bytes compare as
    /// they are).
    static func equalIgnoringASCIICase(_ a: String, _ b: String) -> Bool {
        var i = a.utf8.makeIterator(), j = b.utf8.makeIterator()
        while true {
            switch (i.next(), j.next()) {
            case (nil, nil): return true
            case (let x?, let y?): if x != y && lowerASCII(x) != lowerASCII(y) { return false }
            default: return false
            }
        }
    }

    /// `name` lowercased as `String.lowercased()` does, without a copy when it is already
    /// lowercase ASCII (the usual case: LiveRelay's own header names).
    static func lowercased(_ name: String) -> String {
        name.utf8.allSatisfy { $0 < 0x80 && !(0x41...0x5A).contains($0) } ? name : name.lowercased()
    }

    /// `c` with an ASCII capital letter (A–Z) turned into its small letter; any other byte as it is.
    static func lowerASCII(_ c: UInt8) -> UInt8 { (0x41...0x5A).contains(c) ? c | 0x20 : c }
}

/// One HTTP/2 request (RFC 9113 §8.3.1). The `:scheme` and `:authority` pseudo-headers come
/// from the connection's base URL; `method` and `path` become `:method` and `:path`.
public struct HTTP2Request: HTTP2Message {
    /// `:method`, e.g. `"POST"`.
    public var method: String
    /// `:path` including any query, e.g. `"/3/device/<token>"`. Must start with `/`.
    public var path: String
    /// Regular header fields in order. Names are sent lowercased (RFC 9113 §8.2.1); do not
    /// include pseudo-headers or connection-specific fields (`connection`, `keep-alive`, …).
    public var headers: [(String, String)]
    /// Request body bytes; empty means HEADERS carries END_STREAM.
    public var body: [UInt8]

    /// Creates a request.
    /// - Parameters:
    ///   - method: `:method`, default `"GET"`.
    ///   - path: `:path`, must start with `/`.
    ///   - headers: regular header fields (names are lowercased when sent).
    ///   - body: body bytes (a `content-length` field is added when absent and non-empty).
    public init(method: String = "GET", path: String, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }
}

/// One HTTP/2 response: the `:status` pseudo-header, the regular header fields in the order
/// received (names lowercase on the wire, RFC 9113 §8.2.1), and the full body.
public struct HTTP2Response: HTTP2Message {
    /// `:status`, e.g. 200.
    public let status: Int
    /// Regular header fields in order (no pseudo-headers).
    public let headers: [(String, String)]
    /// Body bytes (DATA frames concatenated).
    public let body: [UInt8]
    /// Server side only: seconds an `HTTP2Server` waits before sending this response, without
    /// holding a thread (the sandbox's injected latency); 0, a negative value or NaN sends it at
    /// once. 0 on responses a client received.
    public var sendDelaySeconds: Double = 0

    /// Creates a response (used by server handlers and tests).
    /// - Parameters:
    ///   - status: HTTP status code, 100…999.
    ///   - headers: regular header fields; names are lowercased when sent.
    ///   - body: body bytes.
    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why a request did not produce a response, split by whether the peer may have acted on it
/// (docs/write-semantics.md "Outcome unknown"; RFC 9113 §8.7 "Request Reliability").
public enum HTTP2Failure: Error, Sendable, Equatable {
    /// The peer provably did not process the request, so it is safe to resend: its stream id
    /// is above a GOAWAY `last_stream_id` (RFC 9113 §6.8), the stream was reset with
    /// `REFUSED_STREAM` (§8.7), the connection could not be established, or its HEADERS were
    /// never completely written to the socket (including a timeout while waiting for a free
    /// stream slot).
    case notProcessed(reason: String)
    /// The request may have reached the peer: the connection was lost after its HEADERS were
    /// written, the stream was reset with a code other than `REFUSED_STREAM`, or the request
    /// timed out after being sent. docs/write-semantics.md: such an outcome is unknown.
    case possiblyProcessed(reason: String)
    /// The TLS handshake failed: certificate chain or host name (SAN) verification, no ALPN
    /// `h2`, or protocol error. Nothing was sent, so the request was not processed.
    case tls(String)

    /// True when the request may be resent without risking a duplicate (`.notProcessed`, `.tls`).
    public var isSafeToResend: Bool {
        if case .possiblyProcessed = self { return false }
        return true
    }
}
