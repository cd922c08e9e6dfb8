import Locking

/// Maps `(method, path)` to a handler. Built before `HTTPServer.start()` and read-only after
/// (`@unchecked Sendable` on that contract: routes live behind a `Locked` anyway, so a late
/// `add` is safe, merely unusual).
///
/// Patterns are absolute paths whose segments are literals or `{name}` placeholders; a
/// placeholder captures exactly one non-empty segment, percent-decoded, into
/// `HTTPRequest.pathParameters[name]`. Literal segments win over placeholders at the first
/// position where two matching patterns differ (`/a/new` beats `/a/{id}`). No path match →
/// 404 `NOT_FOUND`; a path match without the method → 405 `METHOD_NOT_ALLOWED` with an
/// `Allow` header. `HEAD` falls back to the `GET` handler.
public final class Router: @unchecked Sendable {
    enum Segment: Equatable {
        case literal(String)
        case parameter(String)
    }

    struct Route {
        let method: String
        let pattern: String
        let segments: [Segment]
        let handler: HTTPHandler
        /// `Router.specificity(segments)`, computed once at `add`.
        let specificity: [Int]
    }

    /// The outcome of matching a request.
    enum Match {
        case found(handler: HTTPHandler, pattern: String, parameters: [String: String])
        case methodNotAllowed(pattern: String, allow: [String])
        case notFound
    }

    private let table = Locked<[Route]>([])
    /// The routes without placeholders, by method and pattern: a path equal to such a pattern
    /// (so without percent-escapes) is routed by one lookup, and no other route can match it
    /// better (literals win, and two routes cannot share method and pattern).
    private let literal = Locked<[String: [String: Route]]>([:])

    /// Creates an empty router.
    public init() {}

    /// Registers `handler` for `method` (case-insensitive) and `pattern` (must start with "/",
    /// e.g. `"/v1/installations/{id}/targets"`). Registering the same method and pattern twice
    /// or a malformed placeholder is a programming error and traps.
    public func add(_ method: String, _ pattern: String, _ handler: @escaping HTTPHandler) {
        precondition(pattern.hasPrefix("/"), "route pattern must start with /: \(pattern)")
        let segments = Self.segments(of: pattern)
        let m = method.uppercased()
        let route = Route(method: m, pattern: pattern, segments: segments, handler: handler, specificity: Self.specificity(segments))
        table.withLock { routes in
            precondition(
                !routes.contains { $0.method == m && $0.segments == segments },
                "duplicate route \(m) \(pattern)")
            routes.append(route)
        }
        if !route.specificity.contains(1) { literal.withLock { $0[m, default: [:]][pattern] = route } }
    }

    /// Every registered `(method, pattern)`, in registration order.
    public var routes: [(method: String, pattern: String)] {
        table.withLock { $0.map { (method: $0.method, pattern: $0.pattern) } }
    }

    /// Matches a raw (still percent-encoded) path and an uppercased method.
    func match(method: String, path: String) -> Match {
        if let route = literal.withLock({ $0[method]?[path] }) {
            return .found(handler: route.handler, pattern: route.pattern, parameters: [:])
        }
        let raw = Array(path.split(separator: "/", omittingEmptySubsequences: false).dropFirst())
        let decoded = raw.map { URLDecoding.decode($0) }
        var candidates: [(route: Route, parameters: [String: String])] = []
        for route in table.withLock({ $0 }) where route.segments.count == raw.count {
            if let parameters = Self.bind(route.segments, raw: raw, decoded: decoded) {
                candidates.append((route, parameters))
            }
        }
        guard !candidates.isEmpty else { return .notFound }
        let best = { (list: [(route: Route, parameters: [String: String])]) in
            list.min { $0.route.specificity.lexicographicallyPrecedes($1.route.specificity) }
        }
        if let hit = best(candidates.filter { $0.route.method == method })
            ?? (method == "HEAD" ? best(candidates.filter { $0.route.method == "GET" }) : nil)
        {
            return .found(handler: hit.route.handler, pattern: hit.route.pattern, parameters: hit.parameters)
        }
        var allow = Set(candidates.map(\.route.method))
        if allow.contains("GET") { allow.insert("HEAD") }
        return .methodNotAllowed(pattern: best(candidates)!.route.pattern, allow: allow.sorted())
    }

    /// The pattern a path would be routed to regardless of method (for logs and metrics).
    func pattern(for path: String, method: String) -> String? {
        switch match(method: method, path: path) {
        case .found(_, let pattern, _), .methodNotAllowed(let pattern, _): return pattern
        case .notFound: return nil
        }
    }

    static func segments(of pattern: String) -> [Segment] {
        pattern.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { s in
            if s.hasPrefix("{") && s.hasSuffix("}") {
                let name = String(s.dropFirst().dropLast())
                precondition(!name.isEmpty && !name.contains("{") && !name.contains("}"), "bad placeholder in \(pattern)")
                return .parameter(name)
            }
            precondition(!s.contains("{") && !s.contains("}"), "bad placeholder in \(pattern)")
            return .literal(String(s))
        }
    }

    private static func bind(_ segments: [Segment], raw: [Substring], decoded: [String?]) -> [String: String]? {
        guard segments.count == raw.count else { return nil }
        var parameters: [String: String] = [:]
        for (i, segment) in segments.enumerated() {
            switch segment {
            case .literal(let text):
                guard (decoded[i] ?? String(raw[i])) == text else { return nil }
            case .parameter(let name):
                guard let value = decoded[i], !value.isEmpty else { return nil }
                parameters[name] = value
            }
        }
        return parameters
    }

    /// 0 for a literal, 1 for a placeholder: smaller sorts first, so literals win.
    private static func specificity(_ segments: [Segment]) -> [Int] {
        segments.map { if case .literal = $0 { return 0 } else { return 1 } }
    }
}
