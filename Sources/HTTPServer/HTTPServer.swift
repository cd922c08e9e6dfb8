import CMicroHTTPD
import CShims
import Foundation
import Metrics
import Synchronization

/// An HTTP/1.1 server on GNU libmicrohttpd: internal polling thread + epoll + a pool of
/// `configuration.threads` worker threads; handlers run synchronously on the workers.
///
/// Per request it enforces the body limit (SPEC §3: `maxBodyBytes`, 413 `PAYLOAD_TOO_LARGE`
/// with `details.limit`/`details.actual`, decided on `Content-Length` before any body byte is
/// read, and while reading chunked bodies), resolves the request id and echoes it in
/// `X-Request-Id` on every response, routes through `router`, writes one JSON access-log line
/// through `log`, and records `http_requests_total` and `http_request_duration_seconds` in
/// `metrics` when given.
///
/// `@unchecked Sendable`: the mutable lifecycle state (daemon handle, listening socket, phase)
/// is behind a `Mutex`, counters are `Atomic`, everything else is immutable. While running,
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
    private let state = Mutex(State())
    let inFlightCount = Atomic<Int>(0)
    let isDraining = Atomic<Bool>(false)

    /// Creates a stopped server.
    /// - Parameters:
    ///   - router: routes, complete before `start()`.
    ///   - metrics: when given, request counters and duration histograms are registered in it.
    ///   - log: receives one JSON line per request (and handler/libmicrohttpd errors); the
    ///     default writes to standard error. Called concurrently from worker threads.
    public init(configuration: HTTPServerConfiguration, router: Router, metrics: MetricsRegistry? = nil,
                log: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data(($0 + "\n").utf8)) }) {
        self.configuration = configuration
        self.router = router
        self.log = log
        self.dispatcher = RequestDispatcher(router: router, log: log)
        self.observer = RequestObserver(metrics: metrics, accessLog: configuration.accessLog, log: log)
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
            let daemon = lr_mhd_start(fd, UInt32(clamping: max(1, c.threads)), UInt32(clamping: max(0, c.connectionTimeoutSeconds)),
                                      mhdAccessHandler, me, mhdCompletedCallback, me, mhdURILogCallback, me,
                                      mhdLogCallback, me, &logState)
            guard let daemon else {
                close(fd)
                Unmanaged<HTTPServer>.fromOpaque(me).release()
                throw HTTPServerError("libmicrohttpd failed to start on \(c.host):\(boundPort)")
            }
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
    /// `drainTimeoutSeconds` (seconds) passed, then stops the daemon, closing idle connections.
    /// A handler still running at the deadline is waited for (threads are joined, never
    /// killed). Calling it again, or on a server never started, returns immediately.
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
        MHD_stop_daemon(daemon)
        let (me, logState) = state.withLock { s in
            defer { s.phase = .stopped; s.daemon = nil; s.selfReference = nil; s.logState = nil }
            return (s.selfReference, s.logState)
        }
        if let logState { lr_mhd_free_log_state(logState) }
        if let me { Unmanaged<HTTPServer>.fromOpaque(me).release() }
    }
}
