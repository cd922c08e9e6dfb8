import CNGHTTP2
import COpenSSL
import Foundation
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// Server-side state of one stream; touched only by the connection's I/O thread.
final class ServerStream {
    var method = ""
    var path = ""
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var response = OutgoingBody([])
}

/// One accepted connection of `HTTP2Server`: TLS handshake, nghttp2 server session and the
/// I/O loop on its own thread. Handlers run on the server's workers and hand responses back
/// through `completions` + the wake pipe, or run inline on the I/O thread
/// (`HTTP2HandlerThreads`). `@unchecked Sendable`: only `completions`/`stopping` (mutex) are
/// shared; everything else is confined to the I/O thread.
final class HTTP2ServerConnection: @unchecked Sendable {
    unowned let server: HTTP2Server
    let transport: Transport
    let wake = WakePipe()
    let shared = Locked<(completions: [(Int32, HTTP2Response)], stopping: Bool)>(([], false))
    var session: OpaquePointer?
    var streams: [Int32: ServerStream] = [:]
    var begunStreams = 0
    var completedRequests = 0
    var goawayLastStreamID: Int32?
    var abortNow = false
    var faults = HTTP2ServerFaults()
    private var outbound: [UInt8] = []
    private var outboundHead = 0

    init(server: HTTP2Server, fd: Int32) {
        self.server = server
        self.transport = Transport(fd: fd, ssl: nil)
    }

    func stop() {
        shared.withLock { $0.stopping = true }
        wake.signal()
    }

    /// Queues a handler's response for stream `id` (any thread) and wakes the loop; a response
    /// with `sendDelaySeconds` is queued that much later.
    func complete(_ id: Int32, _ response: HTTP2Response) {
        enqueue(id, response, wake: true)
    }

    /// `complete` from the I/O thread itself (a handler run inline; call it from nowhere else):
    /// the loop submits it before its next write, so the wake pipe is not needed.
    func completeOnLoop(_ id: Int32, _ response: HTTP2Response) {
        enqueue(id, response, wake: false)
    }

    /// Appends to `completions` now, or after `sendDelaySeconds` (then always with a wake-up:
    /// by then the loop may be waiting in `poll`).
    private func enqueue(_ id: Int32, _ response: HTTP2Response, wake signal: Bool) {
        if response.sendDelaySeconds > 0 {  // false for NaN too
            var due = response
            due.sendDelaySeconds = 0
            DispatchQueue.global().asyncAfter(deadline: .now() + response.sendDelaySeconds) { [self, due] in
                enqueue(id, due, wake: true)
            }
            return
        }
        shared.withLock { $0.completions.append((id, response)) }
        if signal { wake.signal() }
    }

    func run() {
        defer {
            if let session { nghttp2_session_del(session) }
            session = nil
        }
        guard handshake(), startSession() else { transport.abort(); return }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while !abortNow {
            if shared.withLock({ $0.stopping }) {
                _ = nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR.rawValue)
                _ = flush()
                break
            }
            submitCompletions()
            guard flush() else { break }
            if NGHTTP2.isDone(session, unwritten: outbound.count - outboundHead) { break }
            let ready = NGHTTP2.waitForIO(fd: transport.fd, wake: wake, wantsWrite: outboundHead < outbound.count, timeoutMilliseconds: 1000)
            if ready && !readAvailable(&buffer) { break }
        }
        if abortNow { transport.abort() } else { transport.close() }
    }

    /// TLS accept within 10 s; false on failure (the client sees a handshake error).
    private func handshake() -> Bool {
        guard let context = server.context, let ssl = SSL_new(context) else { return false }
        SSL_set_fd(ssl, transport.fd)
        SSL_set_accept_state(ssl)
        transport.adoptSSL(ssl)
        do { try TLS.handshake(ssl, fd: transport.fd, deadline: Socket.now() + 10) } catch { return false }
        return true
    }

    private func startSession() -> Bool {
        var callbacks: OpaquePointer? = nil
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        Self.installCallbacks(callbacks)
        guard nghttp2_session_server_new(&session, callbacks, Unmanaged.passUnretained(self).toOpaque()) == 0 else {
            return false
        }
        var settings = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue),
                value: UInt32(clamping: server.configuration.maxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20)
        ]
        return nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count) == 0
    }

    /// Submits responses whose handlers finished (streams reset meanwhile are skipped).
    private func submitCompletions() {
        let done = shared.withLock { s -> [(Int32, HTTP2Response)] in
            defer { s.completions.removeAll() }
            return s.completions
        }
        for (id, response) in done {
            guard let stream = streams[id] else { continue }
            stream.response = OutgoingBody(response.body)
            var fields = [(":status", String(response.status))]
            fields.append(contentsOf: response.headers)
            if response.header("content-length") == nil { fields.append(("content-length", String(response.body.count))) }
            var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: Self.readResponse)
            _ = NGHTTP2.withHeaders(fields) { nva, count in
                response.body.isEmpty
                    ? nghttp2_submit_response(session, id, nva, count, nil)
                    : nghttp2_submit_response(session, id, nva, count, &provider)
            }
        }
    }

    private func readAvailable(_ buffer: inout [UInt8]) -> Bool {
        while !abortNow {
            switch buffer.withUnsafeMutableBytes({ transport.read($0.baseAddress!, $0.count) }) {
            case .bytes(let n):
                let rv = buffer.withUnsafeBytes {
                    nghttp2_session_mem_recv(session, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
                }
                if rv < 0 { return false }
            case .wouldBlock: return true
            case .closed, .failed: return false
            }
        }
        return false
    }

    private func flush() -> Bool {
        while true {
            while outboundHead < outbound.count {
                switch outbound.withUnsafeBytes({ transport.write($0.baseAddress! + outboundHead, outbound.count - outboundHead) }) {
                case .bytes(let n): outboundHead += n
                case .wouldBlock: return true
                case .closed, .failed: return false
                }
            }
            outbound.removeAll(keepingCapacity: true)
            outboundHead = 0
            let pulled = NGHTTP2.pull(session, into: &outbound)
            if pulled < 0 { return false }
            if pulled == 0 { return true }
        }
    }
}
