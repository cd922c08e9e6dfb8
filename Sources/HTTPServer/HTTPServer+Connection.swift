import CMicroHTTPD
import CShims
import JSON
import Synchronization

/// A suspended libmicrohttpd connection handed to a worker thread. `@unchecked Sendable`:
/// libmicrohttpd allows `MHD_resume_connection` from any thread, and nothing else is done
/// with the pointer off the polling thread.
struct SuspendedConnection: @unchecked Sendable {
    let raw: OpaquePointer
}

/// What a worker produced for a suspended request, picked up after the resume.
struct RequestOutcome: Sendable {
    var response: HTTPResponse
    var route: String?
    var path: String
    var requestId: String
}

extension HTTPServer {
    /// Bytes of an over-limit chunked body read and discarded (to answer 413 cleanly) before
    /// the connection is simply closed.
    static let discardAllowance = 1 << 20

    /// The access-handler state machine for one request (see `mhdAccessHandler`). Runs on
    /// libmicrohttpd's polling thread, so it never blocks: the handler itself runs on `pool`
    /// while the connection is suspended.
    func handle(
        connection: OpaquePointer, context: RequestContext, method: String,
        uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>
    ) -> MHD_Result {
        let limit = configuration.maxBodyBytes
        if !context.headersSeen {
            context.headersSeen = true
            if connectionGuard.count.load(ordering: .relaxed) > effectiveMaxConnections {
                // Over the soft connection cap (the hard one is a little higher, so this answer fits).
                return respondUnavailable(
                    connection: connection, context: context, method: method,
                    message: "the server is at its connection limit; retry shortly", close: true)
            }
            if let raw = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length") {
                context.declaredLength = Self.parseContentLength(String(cString: raw))
                if let declared = context.declaredLength, declared > limit {
                    // Answer before reading any of the body; libmicrohttpd then closes the connection.
                    return respondTooLarge(connection: connection, context: context, method: method, actual: declared)
                }
            }
            return .YES
        }
        let chunk = uploadDataSize.pointee
        if chunk > 0 {
            uploadDataSize.pointee = 0
            context.received += chunk
            if context.tooLarge {
                return context.received - limit > Self.discardAllowance ? .NO : .YES
            }
            if context.received > limit {
                context.tooLarge = true
                context.body = []
            } else if let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: chunk) {
                    context.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: chunk))
                }
            }
            return .YES
        }
        if context.tooLarge {
            return respondTooLarge(
                connection: connection, context: context, method: method,
                actual: context.declaredLength ?? context.received)
        }
        if context.dispatched {
            // Resumed: a worker left the answer in the context.
            guard
                let outcome = context.outcome.withLock({ o -> RequestOutcome? in
                    defer { o = nil }; return o
                })
            else { return .YES }
            return send(
                outcome.response, on: connection, context: context, method: method, path: outcome.path,
                route: outcome.route, requestId: outcome.requestId)
        }
        return dispatch(connection: connection, context: context, method: method)
    }

    /// Suspends the connection and runs the handler on the worker pool; the worker resumes
    /// the connection with the answer (or a deferred response does, later). A full queue →
    /// `503 SERVICE_UNAVAILABLE` with `Retry-After: 1` at once.
    private func dispatch(connection: OpaquePointer, context: RequestContext, method: String) -> MHD_Result {
        let headers = collectHeaders(connection)
        let (path, rawQuery) = URLDecoding.split(target: context.target)
        let request = HTTPRequest(
            method: method, path: path, query: URLDecoding.parseQuery(rawQuery),
            headers: headers, body: context.body,
            requestId: RequestID.resolve(headers["x-request-id"]),
            remoteAddress: clientAddress(connection))
        context.dispatched = true
        context.body = []
        if let state = connectionState(connection) { connectionGuard.requestRead(state) }
        MHD_suspend_connection(connection)
        let handle = SuspendedConnection(raw: connection)
        let submitted = pool.submit { [self] in
            let (response, route, routed) = dispatcher.respond(to: request)
            if let deferred = response.deferred {
                startDeferred(deferred, request: routed, route: route, context: context, connection: handle)
            } else {
                resume(handle, context: context, with: RequestOutcome(response: response, route: route, path: path, requestId: request.requestId))
            }
        }
        if !submitted {
            let error = HTTPError(
                status: 503, code: "SERVICE_UNAVAILABLE", message: "the server is busy; retry shortly",
                headers: [("Retry-After", "1")])
            let response = dispatcher.finalize(error.response(requestId: request.requestId), requestId: request.requestId, route: nil)
            resume(
                handle, context: context,
                with: RequestOutcome(
                    response: response, route: router.pattern(for: path, method: method),
                    path: path, requestId: request.requestId))
        }
        return .YES
    }

    /// Hands a deferred response its completion; the connection stays suspended until it fires.
    private func startDeferred(
        _ deferred: DeferredResponse, request: HTTPRequest, route: String?, context: RequestContext,
        connection: SuspendedConnection
    ) {
        let id = ObjectIdentifier(context)
        let completion = ResponseCompletion(
            finish: { [self] produce in
                let job: @Sendable () -> Void = { [self] in
                    let response = dispatcher.produce(produce, for: request)
                    _ = pendingDeferred.withLock { $0.removeValue(forKey: id) }
                    resume(
                        connection, context: context,
                        with: RequestOutcome(response: response, route: route, path: request.path, requestId: request.requestId))
                }
                if !pool.submit(force: true, job) { job() }
            },
            runner: { [self] job in
                if !pool.submit(force: true, job) { job() }
            })
        pendingDeferred.withLock { $0[id] = completion }
        deferred.start(completion)
    }

    /// Leaves `outcome` for the polling thread and resumes the connection (never after the
    /// daemon stopped).
    func resume(_ connection: SuspendedConnection, context: RequestContext, with outcome: RequestOutcome) {
        context.outcome.withLock { $0 = outcome }
        resumeGate.withLock { stopped in
            if !stopped { MHD_resume_connection(connection.raw) }
        }
    }

    /// The connection's tracked state (set by the connection-notification callback).
    func connectionState(_ connection: OpaquePointer) -> ConnectionState? {
        guard let raw = lr_mhd_socket_context(connection) else { return nil }
        return Unmanaged<ConnectionState>.fromOpaque(raw).takeUnretainedValue()
    }

    private func respondUnavailable(
        connection: OpaquePointer, context: RequestContext, method: String, message: String,
        close: Bool
    ) -> MHD_Result {
        let headers = collectHeaders(connection)
        let requestId = RequestID.resolve(headers["x-request-id"])
        let path = URLDecoding.split(target: context.target).path
        let error = HTTPError(
            status: 503, code: "SERVICE_UNAVAILABLE", message: message,
            headers: [("Retry-After", "1")] + (close ? [("Connection", "close")] : []))
        let response = dispatcher.finalize(error.response(requestId: requestId), requestId: requestId, route: nil)
        return send(
            response, on: connection, context: context, method: method, path: path,
            route: router.pattern(for: path, method: method), requestId: requestId)
    }

    private func respondTooLarge(connection: OpaquePointer, context: RequestContext, method: String, actual: Int) -> MHD_Result {
        let headers = collectHeaders(connection)
        let requestId = RequestID.resolve(headers["x-request-id"])
        let path = URLDecoding.split(target: context.target).path
        let limit = configuration.maxBodyBytes
        let error = HTTPError(
            status: 413, code: "PAYLOAD_TOO_LARGE", message: "request body exceeds \(limit) bytes",
            details: ["limit": .int(Int64(limit)), "actual": .int(Int64(actual))],
            headers: [("Connection", "close")])
        let response = dispatcher.finalize(error.response(requestId: requestId), requestId: requestId, route: nil)
        return send(
            response, on: connection, context: context, method: method, path: path,
            route: router.pattern(for: path, method: method), requestId: requestId)
    }

    /// Queues `response`, then logs and records metrics. `.NO` (close the connection) when
    /// libmicrohttpd refuses the response.
    private func send(
        _ response: HTTPResponse, on connection: OpaquePointer, context: RequestContext, method: String,
        path: String, route: String?, requestId: String
    ) -> MHD_Result {
        let mhdResponse = response.body.withUnsafeBytes { buffer in
            MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        var closing = false
        for (name, value) in response.headers {
            let lowered = name.lowercased()
            if lowered == "content-length" || lowered == "transfer-encoding" { continue }
            if lowered == "connection" { closing = true }
            if MHD_add_response_header(mhdResponse, name, value) != .YES {
                log(
                    AccessLog.line(
                        level: "warn", msg: "libmicrohttpd refused a response header",
                        fields: ["request_id": .string(requestId), "header": .string(name)]))
            }
        }
        if !closing, isDraining.load(ordering: .acquiring) {
            _ = MHD_add_response_header(mhdResponse, "Connection", "close")
        }
        let result = MHD_queue_response(connection, UInt32(clamping: response.status), mhdResponse)
        let elapsed = ContinuousClock.now - context.start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        observer.record(
            requestId: requestId, method: method, route: route, path: path, status: response.status,
            durationSeconds: seconds, bytesIn: context.received, bytesOut: method == "HEAD" ? 0 : response.body.count)
        return result
    }

    private func collectHeaders(_ connection: OpaquePointer) -> [String: String] {
        let collector = HeaderCollector()
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(
                connection, .HEADER_KIND, mhdHeaderIterator,
                Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.headers
    }

    private func clientAddress(_ connection: OpaquePointer) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        guard lr_mhd_client_address(connection, &buffer, buffer.count) == 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Decimal Content-Length; `Int.max` when it overflows; nil when not a number (then
    /// libmicrohttpd rejects the request itself).
    static func parseContentLength(_ text: String) -> Int? {
        // Optional whitespace around a field value is spaces and tabs (RFC 9110, 5.6.3).
        let bytes = Array(text.utf8)
        let isOWS = { (c: UInt8) in c == 0x20 || c == 0x09 }
        guard let first = bytes.firstIndex(where: { !isOWS($0) }), let last = bytes.lastIndex(where: { !isOWS($0) }) else { return nil }
        let digits = bytes[first...last]
        guard digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(String(decoding: digits, as: UTF8.self)) ?? Int.max
    }
}
