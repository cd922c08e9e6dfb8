import CMicroHTTPD
import CShims
import Foundation
import Metrics
import Locking
import Synchronization

/// An HTTP/1.1 server on GNU libmicrohttpd: one internal polling thread on epoll owns every
/// connection (an idle keep-alive connection costs no thread); a request, once read, is
/// suspended and its handler runs on a pool of `configuration.threads` worker threads, which
/// resumes the connection with the response. A handler may also answer later without holding
/// a worker (`HTTPResponse.deferred`, for long-polls). Connection limits (in all and per
/// address), the per-request read deadline and the 503 answers of a full server are
/// described in docs/http-limits.md.
///
/// Per request it enforces the body limit (docs/http-conventions.md: `maxBodyBytes`, 413 `PAYLOAD_TOO_LARGE`
/// with `details.limit`/`details.actual`, decided on `Content-Length` before any body byte is
/// read, and while reading chunked bodies), resolves the request id and echoes it in
/// `X-Request-Id` on every response, routes through `router`, writes one JSON access-log line
/// through `log`, and records `http_requests_total` and `http_request_duration_seconds` in
/// `metrics` when given.
///
/// `@unchecked Sendable`: the mutable lifecycle state (daemon handle, listening socket, phase)
/// is behind a `Locked`, counters are `Atomic`, everything else is immutable. While running,
/// the daemon holds a strong reference to the server (released by `shutdown`), so a running
/// server never deallocates: call `shutdown` to stop it.
public final class HTTPServer: @unchecked Sendable {
    enum Phase { case idle, running, draining, stopped }

    struct State {
        var phase: Phase = .idle
        var daemon: OpaquePointer?
        var port = 0
        var selfReference: UnsafeMutableRawPointer?
        var logState: UnsafeMutableRawPointer?
    }

    let configuration: HTTPServerConfiguration
    let dispatcher: RequestDispatcher
    let observer: RequestObserver
    let log: @Sendable (String) -> Void
    let router: Router
    private let state = Locked(State())
    let inFlightCount = Atomic<Int>(0)
    let isDraining = Atomic<Bool>(false)
    /// Runs handlers.
    let pool: HandlerPool
    /// Open connections and the read deadline.
    let connectionGuard: ConnectionGuard
    /// Deferred responses not yet completed (forced at shutdown), by request context.
    let pendingDeferred = Locked<[ObjectIdentifier: ResponseCompletion]>([:])
    /// True once the daemon is stopping: no more `MHD_resume_connection` calls.
    let resumeGate = Locked<Bool>(false)
    let maxConnectionsInEffect = Atomic<Int>(0)
    var effectiveMaxConnections: Int { maxConnectionsInEffect.load(ordering: .relaxed) }

    /// Creates a stopped server.
    /// - Parameters:
    ///   - router: routes, complete before `start()`.
    ///   - metrics: when given, request counters and duration histograms are registered in it.
    ///   - log: receives one JSON line per request (and handler/libmicrohttpd errors); the
    ///     default writes to standard error. Called concurrently from worker threads.
    public init(
        configuration: HTTPServerConfiguration, router: Router, metrics: MetricsRegistry? = nil,
        log: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data(($0 + "\n").utf8)) }
    ) {
        self.configuration = configuration
        self.router = router
        self.log = log
        self.dispatcher = RequestDispatcher(router: router, log: log)
        self.observer = RequestObserver(metrics: metrics, accessLog: configuration.accessLog, log: log)
        self.pool = HandlerPool(threads: configuration.threads, maxThreads: configuration.maxThreads, capacity: configuration.maxQueuedRequests)
        self.connectionGuard = ConnectionGuard(deadlineSeconds: configuration.requestReadTimeoutSeconds) { n in
            log(
                AccessLog.line(
                    level: "warn", msg: "connections cut off at the request read deadline",
                    fields: ["count": .int(Int64(n)), "deadline_seconds": .double(configuration.requestReadTimeoutSeconds)]))
        }
        maxConnectionsInEffect.store(configuration.maxConnections, ordering: .relaxed)
    }

    /// Open connections right now (idle ones included).
    public var openConnections: Int { connectionGuard.count.load(ordering: .relaxed) }

    /// Connections cut off so far because a request was not read within
    /// `requestReadTimeoutSeconds`.
    public var connectionsCutOff: Int { connectionGuard.cutOff.load(ordering: .relaxed) }

    /// Raises the soft RLIMIT_NOFILE to the hard limit and returns the soft limit now in effect.
    static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur >= rlim_t(Int32.max) ? Int(Int32.max) : Int(limit.rlim_cur)
    }

    /// Binds `configuration.host:port` (IPv4; names such as "localhost" are resolved to IPv4)
    /// and starts serving.
    /// - Throws: `HTTPServerError` when the server was already started, the port is out of
    ///   range, the host does not resolve, the address is taken
    ///   (`"cannot listen on 127.0.0.1:8080: Address already in use"`, `errno` EADDRINUSE), or
    ///   libmicrohttpd fails to start.
    public func start() throws {
        try state.withLock { (s: inout State) throws(HTTPServerError) in
            guard s.phase == .idle else { throw HTTPServerError("server already started") }
            let c = configuration
            guard (0...65535).contains(c.port) else { throw HTTPServerError("port \(c.port) out of range 0...65535") }
            var boundPort: Int32 = 0
            var error: Int32 = 0
            let fd = lr_mhd_listen_ipv4(c.host, Int32(c.port), 1024, &boundPort, &error)
            guard fd >= 0 else {
                if error < 0 {
                    throw HTTPServerError("cannot resolve host \(c.host) to an IPv4 address: \(String(cString: lr_mhd_gai_strerror(error)))")
                }
                throw HTTPServerError("cannot listen on \(c.host):\(c.port): \(String(cString: strerror(error)))", errno: error)
            }
            let me = Unmanaged.passRetained(self).toOpaque()
            var logState: UnsafeMutableRawPointer?
            // Leave room for the process's other descriptors (database pool, logs, …).
            let descriptors = Self.raiseDescriptorLimit()
            let soft = max(1, min(c.maxConnections, descriptors > 1_024 ? descriptors - 512 : descriptors / 2))
            maxConnectionsInEffect.store(soft, ordering: .relaxed)
            let hard = UInt32(clamping: descriptors > soft + 128 ? soft + 64 : soft)
            pool.start()
            var callbacks = lr_mhd_callbacks(
                access_handler: mhdAccessHandler, completed: mhdCompletedCallback, uri_log: mhdURILogCallback,
                notify_fn: mhdConnectionNotify, log_fn: mhdLogCallback, cls: me)
            let daemon = lr_mhd_start(
                fd, hard, UInt32(clamping: max(0, c.maxConnectionsPerAddress)),
                UInt32(clamping: max(0, c.connectionTimeoutSeconds)), &callbacks, &logState)
            guard let daemon else {
                close(fd)
                pool.stop()
                Unmanaged<HTTPServer>.fromOpaque(me).release()
                throw HTTPServerError("libmicrohttpd failed to start on \(c.host):\(boundPort)")
            }
            connectionGuard.start()
            s = State(phase: .running, daemon: daemon, port: Int(boundPort), selfReference: me, logState: logState)
        }
    }

    /// The bound TCP port (useful with `port: 0`); 0 before `start()`.
    public var port: Int { state.withLock { $0.port } }

    /// Requests currently being received, handled or sent (not idle keep-alive connections).
    public var inFlight: Int { inFlightCount.load(ordering: .acquiring) }

    /// Graceful stop: stops accepting (MHD_quiesce_daemon, then the listening socket is closed,
    /// so new connections are refused at once), answers requests still arriving on open
    /// connections with `Connection: close`, waits until no request is in flight or
    /// `drainTimeoutSeconds` (seconds) passed, answers deferred responses still waiting with
    /// `503 SERVICE_UNAVAILABLE`, then stops the workers and the daemon, closing idle
    /// connections. A handler still running at the deadline is waited for (threads are joined,
    /// never killed). Calling it again, or on a server never started, returns immediately.
    public func shutdown(drainTimeoutSeconds: Double = 30) {
        let daemon: OpaquePointer? = state.withLock { s in
            guard s.phase == .running else { return nil }
            s.phase = .draining
            return s.daemon
        }
        guard let daemon else { return }
        isDraining.store(true, ordering: .releasing)
        let listenFD = MHD_quiesce_daemon(daemon)
        if listenFD >= 0 { close(listenFD) }
        let deadline = ContinuousClock.now + .milliseconds(Int64(max(0, drainTimeoutSeconds) * 1000))
        while inFlight > 0, ContinuousClock.now < deadline {
            usleep(2_000)
        }
        if inFlight > 0 {
            log(AccessLog.line(level: "warn", msg: "shutdown drain timed out", fields: ["in_flight": .int(Int64(inFlight))]))
        }
        for completion in pendingDeferred.withLock({ Array($0.values) }) {
            completion.complete {
                throw HTTPError(
                    status: 503, code: "SERVICE_UNAVAILABLE", message: "the server is shutting down; retry shortly",
                    headers: [("Retry-After", "1")])
            }
        }
        pool.stop()  // runs what is queued (every suspended request gets its answer), joins the workers
        let flushDeadline = ContinuousClock.now + .seconds(1)
        while inFlight > 0, ContinuousClock.now < flushDeadline { usleep(2_000) }
        resumeGate.withLock { $0 = true }
        MHD_stop_daemon(daemon)
        connectionGuard.stop()
        let (me, logState) = state.withLock { s in
            defer { s.phase = .stopped; s.daemon = nil; s.selfReference = nil; s.logState = nil }
            return (s.selfReference, s.logState)
        }
        if let logState { lr_mhd_free_log_state(logState) }
        if let me { Unmanaged<HTTPServer>.fromOpaque(me).release() }
    }
}
