import JSON

/// One HTTP/1.1 request as a handler sees it, fully buffered (the body is at most
/// `HTTPServerConfiguration.maxBodyBytes`, docs/http-conventions.md "Request body limit 64 KiB").
public struct HTTPRequest: Sendable {
    /// Request method, uppercased (`"GET"`, `"POST"`, …).
    public let method: String
    /// Request path without the query string, exactly as sent (still percent-encoded), e.g.
    /// `"/v1/installations/ins_1/targets"`.
    public let path: String
    /// Query arguments, percent-decoded (`+` is a space); when a name repeats, the first value
    /// wins. A name without `=` maps to `""`.
    public let query: [String: String]
    /// Request headers with lowercased names; repeated headers are joined with `", "`.
    public let headers: [String: String]
    /// The raw request body (empty when none).
    public let body: [UInt8]
    /// Values captured by `{name}` segments of the matched route pattern, percent-decoded.
    public internal(set) var pathParameters: [String: String]
    /// The request id (docs/http-conventions.md): the client's `X-Request-Id` when it matches
    /// `^[A-Za-z0-9._:-]{1,128}$`, otherwise a generated `req_` + 26 lowercase base32 chars.
    /// Every response carries it back in `X-Request-Id`.
    public let requestId: String
    /// The matched route pattern, e.g. `"/v1/installations/{id}/targets"`; nil before routing
    /// or when nothing matched.
    public internal(set) var route: String?
    /// The client's numeric IP address (`"127.0.0.1"`), nil when unknown.
    public let remoteAddress: String?

    /// Creates a request directly (for tests of handlers without sockets). Header names are
    /// lowercased here; `method` is uppercased.
    public init(
        method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
        body: [UInt8] = [], requestId: String = RequestID.generate(), pathParameters: [String: String] = [:],
        remoteAddress: String? = nil, route: String? = nil
    ) {
        self.method = method.uppercased()
        self.path = path
        self.query = query
        var lowered: [String: String] = [:]
        for (name, value) in headers {
            let key = name.lowercased()
            if let existing = lowered[key] { lowered[key] = existing + ", " + value } else { lowered[key] = value }
        }
        self.headers = lowered
        self.body = body
        self.requestId = requestId
        self.pathParameters = pathParameters
        self.remoteAddress = remoteAddress
        self.route = route
    }

    /// `path` with every segment percent-decoded as the router decodes it (a `%` or `/` that a
    /// segment decodes to is written back as `%25` / `%2F`), so all the spellings the router
    /// sends to one resource share one form: `/v1/remote-updates/live-activities/%73tart` →
    /// `/v1/remote-updates/live-activities/start`. Idempotency scopes are built from it
    /// (docs/http-conventions.md "Idempotency"): a key sent once as `/start` and once as
    /// `/%73tart` is the same key.
    public var canonicalPath: String {
        guard path.utf8.contains(UInt8(ascii: "%")) else { return path }
        return path.split(separator: "/", omittingEmptySubsequences: false).map { segment -> String in
            guard segment.utf8.contains(UInt8(ascii: "%")), let decoded = URLDecoding.decode(segment) else { return String(segment) }
            return decoded.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "/", with: "%2F")
        }.joined(separator: "/")
    }

    /// The value of header `name` (case-insensitive), nil when absent.
    public func header(_ name: String) -> String? {
        headers[name.lowercased()]
    }

    /// The body parsed as strict RFC 8259 JSON (UTF-8, nesting depth ≤ 64).
    /// - Throws: `HTTPError` 400 `INVALID_REQUEST` with message `"malformed JSON: <reason>"`
    ///   when the body is empty, not UTF-8, not JSON or nested too deeply; `details` is empty
    ///   (no `field`, since no field could be read).
    public func jsonBody() throws -> JSONValue {
        if body.isEmpty {
            throw HTTPError(status: 400, code: "INVALID_REQUEST", message: "malformed JSON: empty request body")
        }
        let value: JSONValue
        do {
            value = try JSONValue.parse(body, maxDepth: 64)
        } catch let error as JSONParseError {
            throw HTTPError(status: 400, code: "INVALID_REQUEST", message: "malformed JSON: \(error.description)")
        } catch {
            throw HTTPError(status: 400, code: "INVALID_REQUEST", message: "malformed JSON")
        }
        // PostgreSQL text and jsonb cannot hold U+0000; refuse it here rather than fail later.
        if let path = Self.nulPath(value, "") {
            throw HTTPError(
                status: 400, code: "INVALID_REQUEST", message: "strings may not contain U+0000 (NUL)",
                details: ["field": .string(path.isEmpty ? "body" : path)])
        }
        return value
    }

    /// Dotted path of the first string or key holding U+0000, nil when there is none.
    static func nulPath(_ v: JSONValue, _ path: String) -> String? {
        func join(_ k: String) -> String { path.isEmpty ? k : "\(path).\(k)" }
        switch v {
        case .string(let s): return s.utf8.contains(0) ? path : nil
        case .array(let a):
            for (i, e) in a.enumerated() { if let p = nulPath(e, join(String(i))) { return p } }
            return nil
        case .object(let o):
            for k in o.keys.sorted() {
                if k.utf8.contains(0) { return join(k) }
                if let p = nulPath(o[k]!, join(k)) { return p }
            }
            return nil
        default: return nil
        }
    }
}
