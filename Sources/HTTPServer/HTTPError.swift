import JSON

/// An error a handler throws to answer with the docs/http-conventions.md error envelope:
/// `{"error": {"code": "...", "message": "...", "details": {...}, "request_id": "..."}}`.
///
/// `code` is one of the documented error codes (docs/http-conventions.md) (`INVALID_REQUEST`, `NOT_FOUND`, …), `message` is
/// human-readable and safe to show to the client, `details` follows docs/http-conventions.md's conventions
/// (`field`, `pointer`, `limit`/`actual`, …).
public struct HTTPError: Error, Sendable {
    /// HTTP status code, e.g. 400.
    public let status: Int
    /// Machine-readable error code, e.g. `"INVALID_REQUEST"`.
    public let code: String
    /// Human-readable message; never contains internals or secrets.
    public let message: String
    /// Structured details; always rendered as an object (empty when none).
    public let details: [String: JSONValue]
    /// Extra response headers (e.g. `Allow` for 405, `Retry-After` for 429).
    public var headers: [(String, String)]

    /// Creates an error answer.
    public init(status: Int, code: String, message: String, details: [String: JSONValue] = [:], headers: [(String, String)] = []) {
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers
    }

    /// The envelope response: JSON body as above with `Content-Type: application/json`,
    /// `X-Request-Id: requestId` and `headers`.
    public func response(requestId: String) -> HTTPResponse {
        let envelope: JSONValue = .object([
            "error": .object([
                "code": .string(code),
                "message": .string(message),
                "details": .object(details),
                "request_id": .string(requestId)
            ])
        ])
        return .json(status, envelope, headers: [("X-Request-Id", requestId)] + headers)
    }

    /// 500 `INTERNAL` "internal error": what any error other than `HTTPError` becomes.
    public static let internalError = HTTPError(status: 500, code: "INTERNAL", message: "internal error")
}

/// Why `HTTPServer.start()` failed (address in use, unresolvable host, already started, …).
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    /// Human-readable reason, e.g. `"cannot listen on 127.0.0.1:8080: Address already in use"`.
    public let message: String
    /// The errno value behind the failure, when there is one (e.g. `EADDRINUSE`).
    public let errno: Int32?
    /// Creates an error with the given message.
    public init(_ message: String, errno: Int32? = nil) { self.message = message; self.errno = errno }
    /// Same as `message`.
    public var description: String { message }
}
