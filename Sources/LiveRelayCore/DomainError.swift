import JSON

/// A rule of the contract that a request broke, carrying exactly what docs/http-conventions.md's error
/// envelope shows: the HTTP status, the the contract's (docs/) `code`, a message naming the field, and
/// `details` (`field` for a request field as a dotted path, `pointer` for an RFC 6901 JSON
/// pointer into a schema or state, `limit`/`actual` for a §7 limit).
///
/// The domain throws these; the API layer maps them once to the HTTP error envelope.
public struct DomainError: Error, Sendable, Equatable, CustomStringConvertible {
    /// HTTP status (400, 401, 403, 404, 409, 410, 413, 422, 429).
    public let status: Int
    /// docs/ error code, e.g. `INVALID_REQUEST`, `STATE_SCHEMA_MISMATCH`.
    public let code: String
    /// One sentence for a developer; names the offending field. Never contains secrets.
    public let message: String
    /// Machine-readable specifics (docs/http-conventions.md "Error details conventions").
    public let details: [String: JSONValue]

    public init(status: Int, code: String, message: String, details: [String: JSONValue] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { "\(status) \(code): \(message)" }

    /// `400 INVALID_REQUEST` about request field `field` (dotted path, e.g. `alert.title`).
    public static func invalid(_ field: String, _ message: String, extra: [String: JSONValue] = [:]) -> DomainError {
        var d = extra
        d["field"] = .string(field)
        return DomainError(status: 400, code: "INVALID_REQUEST", message: message, details: d)
    }

    /// `400 INVALID_REQUEST` for a docs/limits.md limit: `details.limit` and `details.actual`.
    public static func limit(_ field: String, _ message: String, limit: Int, actual: Int) -> DomainError {
        invalid(field, message, extra: ["limit": .int(Int64(limit)), "actual": .int(Int64(actual))])
    }
}
