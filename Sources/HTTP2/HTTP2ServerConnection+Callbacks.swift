import CNGHTTP2
import Foundation

/// nghttp2 callbacks of the server session (I/O thread; context via unretained `Unmanaged`),
/// including fault injection (`HTTP2ServerFaults`).
extension HTTP2ServerConnection {
    static func from(_ user: UnsafeMutableRawPointer?) -> HTTP2ServerConnection {
        Unmanaged<HTTP2ServerConnection>.fromOpaque(user!).takeUnretainedValue()
    }

    static func installCallbacks(_ callbacks: OpaquePointer) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, user in
            guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
                frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
            else { return 0 }
            HTTP2ServerConnection.from(user).streamBegan(frame.pointee.hd.stream_id)
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, namelen, value, valuelen, _, user in
            guard let frame, let stream = HTTP2ServerConnection.from(user).streams[frame.pointee.hd.stream_id] else { return 0 }
            let key = NGHTTP2.string(name, namelen)
            let text = NGHTTP2.string(value, valuelen)
            switch key {
            case ":method": stream.method = text
            case ":path": stream.path = text
            default: if !key.hasPrefix(":") { stream.headers.append((key, text)) }
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, len, user in
            guard let data, let stream = HTTP2ServerConnection.from(user).streams[streamID] else { return 0 }
            stream.body.append(contentsOf: UnsafeBufferPointer(start: data, count: len))
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            let type = UInt32(frame.pointee.hd.type)
            if type == NGHTTP2_HEADERS.rawValue || type == NGHTTP2_DATA.rawValue,
                frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
            {
                HTTP2ServerConnection.from(user).requestComplete(frame.pointee.hd.stream_id)
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, _, user in
            HTTP2ServerConnection.from(user).streams.removeValue(forKey: streamID)
            return 0
        }
    }

    /// DATA source for response bodies.
    static let readResponse: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, user in
        NGHTTP2.readChunk(HTTP2ServerConnection.from(user).streams[streamID]?.response, buffer, length, flags)
    }

    /// A new request stream: apply GOAWAY / refusal faults, else start collecting it.
    private func streamBegan(_ id: Int32) {
        begunStreams += 1
        faults = server.faults
        if let last = goawayLastStreamID, id > last {
            refuse(id)
            return
        }
        if let limit = faults.refuseStreamsAfter, begunStreams > limit {
            refuse(id)
            return
        }
        streams[id] = ServerStream()
        if let n = faults.goawayAfterStreams, begunStreams == n {
            goawayLastStreamID = id
            _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_NO_ERROR.rawValue, nil, 0)
        }
    }

    private func refuse(_ id: Int32) {
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_REFUSED_STREAM.rawValue)
    }

    /// The request on stream `id` was read completely: run the handler where the server says
    /// (`HTTP2HandlerThreads`), after the connection's `responseDelaySeconds` fault if any, and
    /// send its response (after its own `sendDelaySeconds`, if any).
    private func requestComplete(_ id: Int32) {
        guard let stream = streams[id] else { return }
        completedRequests += 1
        let request = HTTP2Request(method: stream.method, path: stream.path, headers: stream.headers, body: stream.body)
        let handler = server.handler
        let delay = faults.responseDelaySeconds
        let drop = faults.dropConnectionAfterRequest == completedRequests
        if drop { abortNow = true }
        let work: @Sendable () -> Void = { [self] in
            let response = handler(request)
            if !drop { complete(id, response) }
        }
        switch server.handlerThreads {
        case .workers where delay > 0:
            // Wait without holding a thread, then run the handler (which may block) on a worker.
            let workers = server.workers
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { workers.submit(work) }
        case .workers:
            server.workers.submit(work)
        case .connection:
            // Here and now; the connection's delay fault only holds the answer back.
            var response = handler(request)
            if delay > 0 { response.sendDelaySeconds = max(0, response.sendDelaySeconds) + delay }
            if !drop { completeOnLoop(id, response) }
        }
    }
}
