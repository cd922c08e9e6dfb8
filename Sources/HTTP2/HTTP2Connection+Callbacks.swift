import CNGHTTP2

/// nghttp2 callbacks of the client session. They run on the I/O thread (inside
/// `nghttp2_session_mem_recv`/`mem_send`) and reach the connection through the session's
/// user-data pointer (`Unmanaged`, unretained: the I/O thread holds the connection).
extension HTTP2Connection {
    static func from(_ user: UnsafeMutableRawPointer?) -> HTTP2Connection {
        Unmanaged<HTTP2Connection>.fromOpaque(user!).takeUnretainedValue()
    }

    static func installCallbacks(_ callbacks: OpaquePointer) {
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            HTTP2Connection.from(user).frameReceived(frame.pointee)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            let connection = HTTP2Connection.from(user)
            if frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
                let stream = connection.streams[frame.pointee.hd.stream_id]
            {
                // nghttp2_session_mem_send reports the frame sent inside the very call that
                // returns its bytes (session_after_frame_sent1), before they are counted: the
                // frame ends where that call's chunk ends (`headersProduced`).
                connection.headersSentInChunk.append(stream)
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, namelen, value, valuelen, _, user in
            guard let frame, let stream = HTTP2Connection.from(user).streams[frame.pointee.hd.stream_id] else { return 0 }
            let key = NGHTTP2.string(name, namelen)
            let text = NGHTTP2.string(value, valuelen)
            if key == ":status" {
                stream.status = Int(text) ?? 0
            } else if !key.hasPrefix(":") {
                stream.headers.append((key, text))
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { session, _, streamID, data, len, user in
            let connection = HTTP2Connection.from(user)
            guard let data, let stream = connection.streams[streamID], !stream.responseTooLarge else { return 0 }
            guard stream.responseBody.count + len <= connection.configuration.maxResponseBodyBytes else {
                stream.responseTooLarge = true
                stream.responseBody = []
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_CANCEL.rawValue)
                return 0
            }
            stream.responseBody.append(contentsOf: UnsafeBufferPointer(start: data, count: len))
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, user in
            HTTP2Connection.from(user).streamClosed(streamID, errorCode: errorCode)
            return 0
        }
    }

    /// DATA source for request bodies: copies the next chunk of the stream's body.
    static let readBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, user in
        NGHTTP2.readChunk(HTTP2Connection.from(user).streams[streamID]?.body, buffer, length, flags)
    }

    private func frameReceived(_ frame: nghttp2_frame) {
        switch UInt32(frame.hd.type) {
        case NGHTTP2_SETTINGS.rawValue:
            if frame.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
                let limit = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                shared.withLock { $0.maxConcurrentStreams = Int(min(limit, 10_000)) }
                settingsSignal.signal()
            }
        case NGHTTP2_PING.rawValue:
            if frame.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { pingSentAt = nil }
        case NGHTTP2_GOAWAY.rawValue:
            // RFC 9113 §6.8: streams above last_stream_id were not processed; nghttp2 closes
            // them (on_stream_close), and queued requests fail here. No new streams after this.
            let last = frame.goaway.last_stream_id
            goawayLastStreamID = min(last, goawayLastStreamID ?? last)
            let queued = shared.withLock { state -> [PendingRequest] in
                state.usable = false
                let queued = state.queue
                state.queue.removeAll()
                return queued
            }
            let code = NGHTTP2.codeName(frame.goaway.error_code)
            for pending in queued {
                pending.complete(.failure(.notProcessed(reason: "connection received GOAWAY \(code) before the request was sent")))
            }
        default:
            break
        }
    }

    private func streamClosed(_ id: Int32, errorCode: UInt32) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        shared.withLock { $0.openStreams = streams.count }
        if stream.responseTooLarge {
            stream.pending.complete(
                .failure(
                    .possiblyProcessed(
                        reason: "stream \(id): response body over \(configuration.maxResponseBodyBytes) bytes")))
        } else if errorCode == NGHTTP2_NO_ERROR.rawValue && stream.status >= 200 {
            stream.pending.complete(.success(HTTP2Response(status: stream.status, headers: stream.headers, body: stream.responseBody)))
        } else if let last = goawayLastStreamID, id > last {
            // nghttp2 closes these with REFUSED_STREAM itself; name the GOAWAY as the cause.
            stream.pending.complete(.failure(classify(stream, id: id, reason: "stream \(id) closed after GOAWAY")))
        } else if errorCode == NGHTTP2_REFUSED_STREAM.rawValue {
            stream.pending.complete(.failure(.notProcessed(reason: "stream \(id) refused (REFUSED_STREAM)")))
        } else {
            stream.pending.complete(.failure(classify(stream, id: id, reason: "stream \(id) closed with \(NGHTTP2.codeName(errorCode))")))
        }
    }
}
