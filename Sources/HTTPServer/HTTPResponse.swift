import JSON

/// A complete response produced by a handler. The server adds `X-Request-Id` (and
/// `Content-Length`); everything else is up to the handler.
public struct HTTPResponse: Sendable {
    /// HTTP status code (100–999; anything else is answered as 500).
    public var status: Int
    /// Response headers in order; names are sent as given. Headers whose name or value contains
    /// CR, LF or NUL are dropped (and logged) rather than sent.
    public var headers: [(String, String)]
    /// Response body bytes (not sent for `HEAD`).
    public var body: [UInt8]
    /// When set, status, headers and body are ignored: the response is produced later by the
    /// deferred work (see `HTTPResponse.deferred`).
    public var deferred: DeferredResponse?

    /// Creates a response with the given status, headers and body.
    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response: `value.serialized()` (canonical, keys sorted) with
    /// `Content-Type: application/json` followed by `headers`.
    public static func json(_ status: Int, _ value: JSONValue, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: value.serialized())
    }

    /// A text response (UTF-8) with the given content type.
    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)], body: Array(text.utf8))
    }

    /// A response finished later by `start` (a long-poll) without holding a worker thread
    /// while it waits; see `DeferredResponse`.
    public static func deferred(_ start: @escaping @Sendable (ResponseCompletion) -> Void) -> HTTPResponse {
        var r = HTTPResponse(status: 200)
        r.deferred = DeferredResponse(start)
        return r
    }

    /// The value of the first header named `name` (case-insensitive), nil when absent.
    public func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.0.lowercased() == lowered }?.1
    }
}
