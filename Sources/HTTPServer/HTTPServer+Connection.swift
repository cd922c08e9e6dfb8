import CMicroHTTPD
import CShims
import JSON

extension HTTPServer {
    /// Bytes of an over-limit chunked body read and discarded (to answer 413 cleanly) before
    /// the connection is simply closed.
    static let discardAllowance = 1 << 20

    /// The access-handler state machine for one request (see `mhdAccessHandler`).
    func handle(connection: OpaquePointer, context: RequestContext, method: String,
                uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>) -> MHD_Result {
        let limit = configuration.maxBodyBytes
        if !context.headersSeen {
            context.headersSeen = true
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
            return respondTooLarge(connection: connection, context: context, method: method,
                                   actual: context.declaredLength ?? context.received)
        }
        return dispatch(connection: connection, context: context, method: method)
    }

    private func dispatch(connection: OpaquePointer, context: RequestContext, method: String) -> MHD_Result {
        let headers = collectHeaders(connection)
        let (path, rawQuery) = URLDecoding.split(target: context.target)
        let request = HTTPRequest(method: method, path: path, query: URLDecoding.parseQuery(rawQuery),
                                  headers: headers, body: context.body,
                                  requestId: RequestID.resolve(headers["x-request-id"]),
                                  remoteAddress: clientAddress(connection))
        let (response, route) = dispatcher.respond(to: request)
        return send(response, on: connection, context: context, method: method, path: path,
                    route: route, requestId: request.requestId)
    }

    private func respondTooLarge(connection: OpaquePointer, context: RequestContext, method: String, actual: Int) -> MHD_Result {
        let headers = collectHeaders(connection)
        let requestId = RequestID.resolve(headers["x-request-id"])
        let path = URLDecoding.split(target: context.target).path
        let limit = configuration.maxBodyBytes
        let error = HTTPError(status: 413, code: "PAYLOAD_TOO_LARGE", message: "request body exceeds \(limit) bytes",
                              details: ["limit": .int(Int64(limit)), "actual": .int(Int64(actual))],
                              headers: [("Connection", "close")])
        let response = dispatcher.finalize(error.response(requestId: requestId), requestId: requestId, route: nil)
        return send(response, on: connection, context: context, method: method, path: path,
                    route: router.pattern(for: path, method: method), requestId: requestId)
    }

    /// Queues `response`, then logs and records metrics. `.NO` (close the connection) when
    /// libmicrohttpd refuses the response.
    private func send(_ response: HTTPResponse, on connection: OpaquePointer, context: RequestContext, method: String,
                      path: String, route: String?, requestId: String) -> MHD_Result {
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
                log(AccessLog.line(level: "warn", msg: "libmicrohttpd refused a response header",
                                   fields: ["request_id": .string(requestId), "header": .string(name)]))
            }
        }
        if !closing, isDraining.load(ordering: .acquiring) {
            _ = MHD_add_response_header(mhdResponse, "Connection", "close")
        }
        let result = MHD_queue_response(connection, UInt32(clamping: response.status), mhdResponse)
        let elapsed = ContinuousClock.now - context.start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        observer.record(requestId: requestId, method: method, route: route, path: path, status: response.status,
                        durationSeconds: seconds, bytesIn: context.received, bytesOut: method == "HEAD" ? 0 : response.body.count)
        return result
    }

    private func collectHeaders(_ connection: OpaquePointer) -> [String: String] {
        let collector = HeaderCollector()
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(connection, .HEADER_KIND, mhdHeaderIterator,
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
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(trimmed) ?? Int.max
    }
}
