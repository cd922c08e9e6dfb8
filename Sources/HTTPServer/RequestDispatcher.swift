import JSON

/// Routes a buffered request, runs its handler and turns every outcome into a response: the
/// pure part of request handling, testable without sockets.
struct RequestDispatcher: Sendable {
    let router: Router
    let log: @Sendable (String) -> Void

    /// The final response (with `X-Request-Id`), the matched route pattern and the request
    /// as routed (with `route` and `pathParameters`; needed to finish a deferred response).
    func respond(to incoming: HTTPRequest) -> (response: HTTPResponse, route: String?, request: HTTPRequest) {
        var request = incoming
        let response: HTTPResponse
        var route: String?
        switch router.match(method: request.method, path: request.path) {
        case .notFound:
            response = HTTPError(status: 404, code: "NOT_FOUND", message: "no route for this path")
                .response(requestId: request.requestId)
        case .methodNotAllowed(let pattern, let allow):
            route = pattern
            response = HTTPError(
                status: 405, code: "METHOD_NOT_ALLOWED",
                message: "method \(request.method) is not allowed here",
                details: ["allowed_methods": .array(allow.map { .string($0) })],
                headers: [("Allow", allow.joined(separator: ", "))]
            )
            .response(requestId: request.requestId)
        case .found(let handler, let pattern, let parameters):
            route = pattern
            request.route = pattern
            request.pathParameters = parameters
            response = run(handler, request)
        }
        return (finalize(response, requestId: request.requestId, route: route), route, request)
    }

    /// The second half of a deferred response: runs `produce`, mapping errors as for a
    /// handler, and finalizes the result for `request`.
    func produce(_ produce: () throws -> HTTPResponse, for request: HTTPRequest) -> HTTPResponse {
        var response = run({ _ in try produce() }, request)
        if response.deferred != nil {
            log(
                AccessLog.line(
                    level: "error", msg: "a deferred response completed with another deferred response",
                    fields: [
                        "request_id": .string(request.requestId), "route": request.route.map { .string($0) } ?? .null
                    ]))
            response = HTTPError.internalError.response(requestId: request.requestId)
        }
        return finalize(response, requestId: request.requestId, route: request.route)
    }

    private func run(_ handler: (HTTPRequest) throws -> HTTPResponse, _ request: HTTPRequest) -> HTTPResponse {
        do {
            return try handler(request)
        } catch let error as HTTPError {
            return error.response(requestId: request.requestId)
        } catch {
            log(
                AccessLog.line(
                    level: "error", msg: "handler error",
                    fields: [
                        "request_id": .string(request.requestId),
                        "route": request.route.map { .string($0) } ?? .null,
                        "error": .string(String(describing: error))
                    ]))
            return HTTPError.internalError.response(requestId: request.requestId)
        }
    }

    /// Enforces what every response must satisfy: a sendable status, headers without CR/LF/NUL,
    /// exactly one `X-Request-Id` (ours).
    func finalize(_ response: HTTPResponse, requestId: String, route: String?) -> HTTPResponse {
        var out = response
        if !(100...999).contains(out.status) {
            log(
                AccessLog.line(
                    level: "error", msg: "handler returned an invalid status",
                    fields: [
                        "request_id": .string(requestId), "status": .int(Int64(out.status))
                    ]))
            out = HTTPError.internalError.response(requestId: requestId)
        }
        out.headers = out.headers.filter { name, value in
            if name.lowercased() == "x-request-id" { return false }
            let bad =
                name.isEmpty || name.utf8.contains { $0 == 0 || $0 == 10 || $0 == 13 || $0 == 58 || $0 == 32 }
                || value.utf8.contains { $0 == 0 || $0 == 10 || $0 == 13 }
            if bad {
                log(
                    AccessLog.line(
                        level: "warn", msg: "dropped invalid response header",
                        fields: [
                            "request_id": .string(requestId), "route": route.map { .string($0) } ?? .null
                        ]))
            }
            return !bad
        }
        out.headers.insert(("X-Request-Id", requestId), at: 0)
        return out
    }
}
