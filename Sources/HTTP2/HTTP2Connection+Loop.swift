import CNGHTTP2
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The I/O thread: poll, read into nghttp2, write what nghttp2 produces, open queued streams,
/// enforce timeouts and keepalive.
extension HTTP2Connection {
    func run() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var failure: String? = nil
        while failure == nil {
            if shared.withLock({ $0.closing }) { failure = "connection closed"; break }
            let now = Socket.now()
            openQueuedStreams(now: now)
            if now >= nextDeadlineCheck { expireStreams(now: now) }
            if let reason = keepalive(now: now) { failure = reason; break }
            if let reason = flush() { failure = reason; break }
            reportWritten()
            if NGHTTP2.isDone(session, unwritten: outbound.count - outboundHead) { break }
            let ready = NGHTTP2.waitForIO(
                fd: transport.fd, wake: wake, wantsWrite: outboundHead < outbound.count, timeoutMilliseconds: pollTimeoutMilliseconds(now: now))
            if ready { failure = readAvailable(&buffer) }
        }
        finish(reason: failure)
    }

    /// Calls `onWritten` for every request whose HEADERS the socket has accepted by now.
    private func reportWritten() {
        while writeWatchHead < writeWatch.count && writeWatch[writeWatchHead].end <= writtenBytes {
            writeWatch[writeWatchHead].pending.onWritten?()
            writeWatchHead += 1
        }
        if writeWatchHead == writeWatch.count { writeWatch.removeAll(keepingCapacity: true); writeWatchHead = 0 }
    }

    /// Milliseconds until the earliest request deadline or keepalive check (at most 1 s).
    /// `nextDeadlineCheck` is the earliest open stream's deadline (kept by `expireStreams` and
    /// `submit`), so this costs O(1) however many streams are open.
    private func pollTimeoutMilliseconds(now: Double) -> Int32 {
        var next = min(now + 1, nextDeadlineCheck)
        if let first = shared.withLock({ $0.queue.first }) { next = min(next, first.deadline) }
        return Int32(max(0, (next - now) * 1000).rounded(.up))
    }

    /// Reads until the socket would block, feeding nghttp2. Returns a failure reason, if any.
    private func readAvailable(_ buffer: inout [UInt8]) -> String? {
        while true {
            let result = buffer.withUnsafeMutableBytes { transport.read($0.baseAddress!, $0.count) }
            switch result {
            case .bytes(let n):
                lastActivity = Socket.now()
                let rv = buffer.withUnsafeBytes {
                    nghttp2_session_mem_recv(session, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
                }
                if rv < 0 { return "HTTP/2 protocol error: \(NGHTTP2.errorText(rv))" }
            case .wouldBlock:
                return nil
            case .closed:
                return nghttp2_session_want_read(session) == 0 ? nil : "connection closed by peer"
            case .failed(let text):
                return text
            }
        }
    }

    /// Writes buffered bytes, then pulls everything nghttp2 has to send. Returns a failure reason.
    func flush() -> String? {
        while true {
            while outboundHead < outbound.count {
                let result = outbound.withUnsafeBytes {
                    transport.write($0.baseAddress! + outboundHead, outbound.count - outboundHead)
                }
                switch result {
                case .bytes(let n):
                    outboundHead += n
                    writtenBytes += UInt64(n)
                case .wouldBlock:
                    return nil
                case .closed:
                    return "connection closed by peer"
                case .failed(let text):
                    return text
                }
            }
            outbound.removeAll(keepingCapacity: true)
            outboundHead = 0
            let pulled = NGHTTP2.pull(session, into: &outbound) { headersProduced(UInt64($0)) }
            if pulled < 0 { return "HTTP/2 session error: \(NGHTTP2.errorText(pulled))" }
            if pulled == 0 { return nil }
        }
    }

    /// Counts a chunk `mem_send` returned (`n` bytes) and ends the HEADERS frames it reported
    /// sent meanwhile at the chunk's end: only once every byte up to there was written is a
    /// request possibly processed (`classify`), and its `onWritten` called.
    func headersProduced(_ n: UInt64) {
        producedBytes += n
        guard !headersSentInChunk.isEmpty else { return }
        for stream in headersSentInChunk {
            stream.headersEnd = producedBytes
            if stream.pending.onWritten != nil { writeWatch.append((producedBytes, stream.pending)) }
        }
        headersSentInChunk.removeAll(keepingCapacity: true)
    }

    /// Opens streams for queued requests while the peer's concurrency limit allows
    /// (RFC 9113 §5.1.2); fails queued requests whose deadline passed (never sent).
    private func openQueuedStreams(now: Double) {
        let limit = Int(min(nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 10_000))
        let goingAway = goawayLastStreamID != nil
        let free = goingAway ? 0 : max(0, limit - streams.count)
        let (ready, expired) = shared.withLock { state -> ([PendingRequest], [PendingRequest]) in
            state.maxConcurrentStreams = limit
            // The queue is FIFO with equal timeouts, so expired requests are at its front; a
            // request completed by a blocked caller's backstop is skipped where it stands.
            var expired: [PendingRequest] = []
            var ready: [PendingRequest] = []
            var i = 0
            while i < state.queue.count {
                let p = state.queue[i]
                if p.deadline <= now || p.isCompleted { expired.append(p); i += 1; continue }
                if ready.count >= free { break }
                ready.append(p)
                i += 1
            }
            if i > 0 { state.queue.removeFirst(i) }
            return (ready, expired)
        }
        for pending in expired where !pending.isCompleted {
            pending.complete(.failure(.notProcessed(reason: "timed out waiting for a free stream")))
        }
        for pending in ready { submit(pending) }
        shared.withLock { $0.openStreams = streams.count }
    }

    /// Submits HEADERS (and a DATA provider for the body) for one request.
    private func submit(_ pending: PendingRequest) {
        let request = pending.request
        var fields = [
            (":method", request.method), (":scheme", scheme), (":authority", authority),
            (":path", request.path)
        ]
        fields.append(contentsOf: request.headers)
        if !request.body.isEmpty && request.header("content-length") == nil {
            fields.append(("content-length", String(request.body.count)))
        }
        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: Self.readBody)
        let id = NGHTTP2.withHeaders(fields) { nva, count in
            request.body.isEmpty
                ? nghttp2_submit_request(session, nil, nva, count, nil, nil)
                : nghttp2_submit_request(session, nil, nva, count, &provider, nil)
        }
        if id < 0 {
            if id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
                // Every stream id of this connection is used (RFC 9113 §5.1.1: 2^31 − 1 at most):
                // it takes no new request (the pool opens another connection); a GOAWAY tells
                // the peer, and the session ends once its open streams have finished.
                shared.withLock { $0.usable = false }
                _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, NGHTTP2_NO_ERROR.rawValue, nil, 0)
            }
            pending.complete(.failure(.notProcessed(reason: "cannot submit request: \(NGHTTP2.errorText(Int(id)))")))
            return
        }
        streams[id] = ClientStream(pending)
        nextDeadlineCheck = min(nextDeadlineCheck, pending.deadline)
    }

    /// Times out open streams: RST_STREAM CANCEL (RFC 9113 §8.7) and the matching failure.
    /// Runs when the earliest open stream's deadline (`nextDeadlineCheck`) has come, and
    /// recomputes it from the streams still open.
    private func expireStreams(now: Double) {
        var next = Double.infinity
        for (id, stream) in streams where !stream.pending.isCompleted {
            if stream.pending.deadline <= now {
                stream.pending.complete(.failure(classify(stream, id: id, reason: "request timed out")))
                _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_CANCEL.rawValue)
            } else {
                next = min(next, stream.pending.deadline)
            }
        }
        nextDeadlineCheck = next
    }

    /// PING after `pingIntervalSeconds` of silence; the connection is lost when the ACK does not
    /// arrive within another interval (RFC 9113 §6.7).
    private func keepalive(now: Double) -> String? {
        let interval = configuration.pingIntervalSeconds
        guard interval > 0 else { return nil }
        if let sent = pingSentAt {
            return now - sent > interval ? "PING not acknowledged within \(interval) s" : nil
        }
        if now - lastActivity >= interval {
            _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
            pingSentAt = now
        }
        return nil
    }

    /// The failure for a stream that ends without a response: `.notProcessed` when the peer
    /// provably did not process it, else `.possiblyProcessed` (docs/write-semantics.md).
    func classify(_ stream: ClientStream, id: Int32, reason: String) -> HTTP2Failure {
        if let last = goawayLastStreamID, id > last {
            return .notProcessed(reason: "\(reason); stream \(id) is above GOAWAY last_stream_id \(last)")
        }
        guard let end = stream.headersEnd, writtenBytes >= end else {
            return .notProcessed(reason: "\(reason); request was never written")
        }
        return .possiblyProcessed(reason: reason)
    }

    /// Ends the session: fails everything left, sends GOAWAY best-effort, closes the socket.
    private func finish(reason: String?) {
        let queued = shared.withLock { state -> [PendingRequest] in
            state.usable = false
            let queued = state.queue
            state.queue.removeAll()
            return queued
        }
        let text = reason ?? "connection ended"
        for pending in queued { pending.complete(.failure(.notProcessed(reason: "\(text) before the request was sent"))) }
        for (id, stream) in streams { stream.pending.complete(.failure(classify(stream, id: id, reason: text))) }
        streams.removeAll()
        if reason == "connection closed" {
            _ = nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR.rawValue)
            _ = flush()
        }
        transport.close()
        settingsSignal.signal()
        shared.withLock {
            $0.finished = true
            $0.openStreams = 0
        }
        finishedSignal.signal()
    }
}
