import CNGHTTP2
import COpenSSL
import Foundation
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 client connection (RFC 9113) over TLS 1.2+ with ALPN "h2", driven by nghttp2.
///
/// Threading model: the connection owns one I/O thread that alone touches the socket, the
/// OpenSSL `SSL` object and the nghttp2 session (non-blocking socket + `poll`). `send` may be
/// called from any number of threads at once: it queues the request under a mutex, wakes the
/// I/O thread through a self-pipe, and blocks its caller until the response or a failure;
/// `submit` does the same without blocking and calls a completion instead.
/// The I/O thread opens a stream for a queued request only while fewer streams are open than
/// the peer's `SETTINGS_MAX_CONCURRENT_STREAMS` (RFC 9113 §5.1.2); others wait in FIFO order.
/// That is why the type is `@unchecked Sendable`: its mutable state is either behind `shared`
/// (a `Locked`) or confined to the I/O thread.
///
/// Lifetime: the I/O thread keeps the object alive until `close()` is called or the
/// connection ends by itself (GOAWAY with no streams left, or connection loss). Call
/// `close()` when done with a usable connection.
///
/// Ignores SIGPIPE process-wide (OpenSSL writes with `write(2)`).
public final class HTTP2Connection: @unchecked Sendable {
    struct Shared {
        var queue: [PendingRequest] = []
        var usable = true
        var closing = false
        var finished = false
        var maxConcurrentStreams = 100
        var openStreams = 0
    }

    let configuration: HTTP2ClientConfiguration
    let shared = Locked(Shared())
    let wake = WakePipe()
    let finishedSignal = DispatchSemaphore(value: 0)
    let settingsSignal = DispatchSemaphore(value: 0)
    let scheme: String
    let authority: String

    // I/O-thread state (also set up in init before the thread starts).
    let transport: Transport
    var session: OpaquePointer?
    var streams: [Int32: ClientStream] = [:]
    var outbound: [UInt8] = []
    var outboundHead = 0
    /// Bytes produced by nghttp2 so far / bytes accepted by the socket (TLS) so far.
    var producedBytes: UInt64 = 0
    var writtenBytes: UInt64 = 0
    var goawayLastStreamID: Int32?
    /// Streams whose HEADERS frame nghttp2 reported sent (`on_frame_send`) during the current
    /// `mem_send` call: their frame ends with the bytes that call returns, so `headersEnd` is
    /// set once those bytes are counted (`headersProduced`).
    var headersSentInChunk: [ClientStream] = []
    /// Requests whose HEADERS end at the given outbound offset and want `onWritten` (in order).
    var writeWatch: [(end: UInt64, pending: PendingRequest)] = []
    var writeWatchHead = 0
    var lastActivity = Socket.now()
    /// Earliest deadline of an open stream (monotonic seconds; infinity when none): when the
    /// I/O loop next scans the open streams for timeouts.
    var nextDeadlineCheck = Double.infinity
    var pingSentAt: Double?

    /// Connects: TCP, then TLS 1.2+ with SNI, certificate chain verification against the system
    /// CAs plus `extraCAFile`, host name (SAN) verification and ALPN "h2", then exchanges the
    /// connection preface and waits for the peer's first SETTINGS frame (RFC 9113 §3.4), all
    /// within `connectTimeoutSeconds`.
    /// - Throws: `HTTP2Failure.tls` for handshake or verification failures,
    ///   `HTTP2Failure.notProcessed` for resolution, connect or timeout failures.
    public init(configuration: HTTP2ClientConfiguration) throws {
        _ = Socket.ignoreSIGPIPE
        let endpoint = try configuration.endpoint()
        let deadline = Socket.now() + configuration.connectTimeoutSeconds
        let fd = try Socket.connect(host: endpoint.host, port: endpoint.port, deadline: deadline)
        var ssl: OpaquePointer? = nil
        if endpoint.tls {
            do {
                let context = try TLS.clientContext(extraCAFile: configuration.extraCAFile)
                defer { SSL_CTX_free(context) }
                ssl = try TLS.connect(fd: fd, context: context, host: endpoint.host, deadline: deadline)
            } catch {
                Glibc.close(fd)
                throw error
            }
        }
        self.configuration = configuration
        self.transport = Transport(fd: fd, ssl: ssl)
        self.scheme = endpoint.tls ? "https" : "http"
        let defaultPort = endpoint.tls ? 443 : 80
        let hostText = endpoint.host.contains(":") ? "[\(endpoint.host)]" : endpoint.host
        self.authority = endpoint.port == defaultPort ? hostText : "\(hostText):\(endpoint.port)"
        try startSession()
        let thread = Thread { self.run() }
        thread.name = "HTTP2Connection \(authority)"
        thread.start()
        let remaining = deadline - Socket.now()
        if settingsSignal.wait(timeout: .now() + max(remaining, 0)) == .timedOut {
            close()
            throw HTTP2Failure.notProcessed(reason: "no SETTINGS from \(authority) within the connect timeout")
        }
        if !isUsable {
            close()
            throw HTTP2Failure.notProcessed(reason: "connection to \(authority) ended during setup")
        }
    }

    /// Sends `request` and blocks until its complete response (any status) or a failure.
    /// Safe to call from many threads at once; requests beyond the peer's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` wait for a free stream. The whole call is limited by
    /// `requestTimeoutSeconds`.
    /// - Throws: `HTTP2Failure.notProcessed` when the request provably did not reach the peer
    ///   (connection unusable, GOAWAY above it, REFUSED_STREAM, never written, timed out while
    ///   queued); `HTTP2Failure.possiblyProcessed` when it may have (connection lost or timed
    ///   out after sending, other stream reset). docs/write-semantics.md.
    public func send(_ request: HTTP2Request) throws -> HTTP2Response {
        let pending = PendingRequest(request, deadline: Socket.now() + configuration.requestTimeoutSeconds)
        guard enqueue(pending) else { throw HTTP2Failure.notProcessed(reason: "connection is not usable") }
        return try pending.wait(backstopSeconds: configuration.requestTimeoutSeconds + 10).get()
    }

    /// Sends `request` without blocking: it is queued for the I/O thread, which opens its stream
    /// as soon as fewer than the peer's `SETTINGS_MAX_CONCURRENT_STREAMS` are open, and
    /// `completion` is called exactly once with the response or the failure (same
    /// classification and `requestTimeoutSeconds` limit as `send`). `onWritten` is called once
    /// when the request's HEADERS frame has been completely written to the socket (the moment
    /// the request counts as sent). Both run on the I/O thread (or at once on the caller's, when
    /// the connection is not usable): keep them short, never block in them.
    public func submit(
        _ request: HTTP2Request, onWritten: (@Sendable () -> Void)? = nil,
        completion: @escaping @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void
    ) {
        let pending = PendingRequest(
            request, deadline: Socket.now() + configuration.requestTimeoutSeconds, onWritten: onWritten,
            completion: completion)
        if !enqueue(pending) { pending.complete(.failure(.notProcessed(reason: "connection is not usable"))) }
    }

    /// Queues `pending` for the I/O thread; false when the connection takes no new requests.
    func enqueue(_ pending: PendingRequest) -> Bool {
        let accepted = shared.withLock { state -> Bool in
            guard state.usable, !state.closing, !state.finished else { return false }
            state.queue.append(pending)
            return true
        }
        if accepted { wake.signal() }
        return accepted
    }

    /// False once the connection received GOAWAY, was lost or closed: it takes no new requests
    /// (streams already open may still finish).
    public var isUsable: Bool { shared.withLock { $0.usable && !$0.closing && !$0.finished } }

    /// The peer's current `SETTINGS_MAX_CONCURRENT_STREAMS` (RFC 9113 §6.5.2), capped at 10 000.
    public var maxConcurrentStreams: Int { shared.withLock { $0.maxConcurrentStreams } }

    /// Requests queued or open on this connection (for pool balancing).
    var load: Int { shared.withLock { $0.queue.count + $0.openStreams } }

    /// Closes the connection: queued requests fail `.notProcessed`, open streams fail
    /// `.possiblyProcessed` (or `.notProcessed` if their HEADERS were never written), a GOAWAY
    /// NO_ERROR is sent best-effort, and the socket is closed. Blocks until the I/O thread has
    /// finished. Idempotent.
    public func close() {
        shared.withLock { $0.closing = true }
        wake.signal()
        finishedSignal.wait()
        finishedSignal.signal()
    }

    /// Creates the nghttp2 client session and queues the client SETTINGS (push disabled).
    private func startSession() throws {
        var callbacks: OpaquePointer? = nil
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw HTTP2Failure.notProcessed(reason: "nghttp2: out of memory")
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        Self.installCallbacks(callbacks)
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_client_new(&session, callbacks, context) == 0 else {
            throw HTTP2Failure.notProcessed(reason: "nghttp2: cannot create session")
        }
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20)
        ]
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 << 20)
        if configuration.firstStreamID > 1 { _ = nghttp2_session_set_next_stream_id(session, configuration.firstStreamID) }
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }
}
