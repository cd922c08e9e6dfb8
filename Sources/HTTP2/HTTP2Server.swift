import COpenSSL
import Foundation
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// Settings of an `HTTP2Server`.
public struct HTTP2ServerConfiguration: Sendable {
    /// Numeric IP address to listen on (default loopback `127.0.0.1`).
    public var host: String
    /// TCP port; 0 picks a free ephemeral port (read it from `HTTP2Server.port`).
    public var port: Int
    /// Server certificate PEM; further certificates in the text are sent as its chain.
    public var certificatePEM: String
    /// Private key PEM of the certificate (PKCS#8 or traditional, unencrypted).
    public var privateKeyPEM: String
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` announced to each client (RFC 9113 §6.5.2).
    public var maxConcurrentStreams: Int

    /// Creates a configuration; see the properties.
    public init(
        host: String = "127.0.0.1", port: Int = 0, certificatePEM: String, privateKeyPEM: String,
        maxConcurrentStreams: Int = 1000
    ) {
        self.host = host
        self.port = port
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
        self.maxConcurrentStreams = maxConcurrentStreams
    }
}

/// Faults the server injects, for tests of clients and for the local APNs/FCM sandbox. All
/// counts are per connection and 1-based, in the order streams (requests) arrive.
public struct HTTP2ServerFaults: Sendable, Equatable {
    /// After the Nth stream begins, send GOAWAY NO_ERROR with `last_stream_id` = that stream's
    /// id (RFC 9113 §6.8); later streams are refused/ignored, the first N are answered, then
    /// the connection closes.
    public var goawayAfterStreams: Int?
    /// When the Nth request has been read completely, close the TCP connection at once without
    /// answering anything. The handler is still called for that request (its response is
    /// discarded): the request *was* processed, the client cannot know it.
    public var dropConnectionAfterRequest: Int?
    /// Streams after the first N are reset with `REFUSED_STREAM` (RFC 9113 §8.7) without
    /// calling the handler.
    public var refuseStreamsAfter: Int?
    /// Seconds each request waits before the handler runs (no thread is held meanwhile).
    public var responseDelaySeconds: Double

    /// Creates a fault set; the default injects nothing.
    public init(
        goawayAfterStreams: Int? = nil, dropConnectionAfterRequest: Int? = nil,
        refuseStreamsAfter: Int? = nil, responseDelaySeconds: Double = 0
    ) {
        self.goawayAfterStreams = goawayAfterStreams
        self.dropConnectionAfterRequest = dropConnectionAfterRequest
        self.refuseStreamsAfter = refuseStreamsAfter
        self.responseDelaySeconds = responseDelaySeconds
    }
}

/// Handles one complete request and returns its response. With `HTTP2HandlerThreads.workers`
/// it is called on one of the server's worker threads (a new one is started when all are busy,
/// up to 512), concurrently for concurrent streams, and may block (e.g. to simulate latency);
/// with `.connection` it runs on the connection's I/O thread and must not block. Either way a
/// response whose `sendDelaySeconds` is above 0 is sent that many seconds later, without
/// holding a thread.
public typealias HTTP2Handler = @Sendable (HTTP2Request) -> HTTP2Response

/// Where an `HTTP2Server` runs its handler.
public enum HTTP2HandlerThreads: Sendable, Equatable {
    /// On a pool of worker threads: the handler may block. Each request costs a hand-over to a
    /// worker and back (two thread wake-ups).
    case workers
    /// On the connection's own I/O thread, as soon as the request is complete (the
    /// connection's `responseDelaySeconds` fault, if any, is added to the response's
    /// `sendDelaySeconds`): the handler must never block (it stalls every stream of its
    /// connection meanwhile) and should return quickly. Responses go out with the loop's next
    /// write, so a burst of requests read together is answered together. The local APNs/FCM
    /// sandbox runs so (docs/providers.md "The local sandbox's threads").
    case connection
}

/// A small HTTP/2 server over TLS (ALPN "h2" only, TLS 1.2+), driven by nghttp2: the local
/// APNs/FCM sandbox and tests. One accept thread, one I/O thread per connection, handlers on
/// worker threads or on the connection's I/O thread (`HTTP2HandlerThreads`).
/// `@unchecked Sendable`: mutable state is behind `state` (a `Locked`); `context` is written
/// once in `start()` before any thread uses it.
public final class HTTP2Server: @unchecked Sendable {
    struct State {
        var listenFD: Int32 = -1
        var port = 0
        var running = false
        var faults = HTTP2ServerFaults()
        var connections: [ObjectIdentifier: HTTP2ServerConnection] = [:]
    }

    let configuration: HTTP2ServerConfiguration
    let handler: HTTP2Handler
    let handlerThreads: HTTP2HandlerThreads
    let state = Locked(State())
    /// Threads that run `handler` (grow on demand; see `WorkerPool`).
    let workers = WorkerPool(name: "HTTP2Server handler")
    private let wake = WakePipe()
    private let acceptDone = DispatchSemaphore(value: 0)
    private let connectionThreads = DispatchGroup()
    private(set) var context: OpaquePointer?

    /// Creates a stopped server; `start()` listens. `handlerThreads`: where `handler` runs
    /// (default `.workers`, for handlers that may block).
    public init(
        configuration: HTTP2ServerConfiguration, handlerThreads: HTTP2HandlerThreads = .workers,
        handler: @escaping HTTP2Handler
    ) {
        self.configuration = configuration
        self.handlerThreads = handlerThreads
        self.handler = handler
    }

    /// Loads the certificate and key, listens and starts accepting connections.
    /// - Throws: `HTTP2Failure.tls` for an unusable certificate or key,
    ///   `HTTP2Failure.notProcessed` when the address cannot be bound.
    public func start() throws {
        _ = Socket.ignoreSIGPIPE
        guard !state.withLock({ $0.running }) else { return }
        if context == nil {
            context = try TLS.serverContext(
                certificatePEM: configuration.certificatePEM,
                privateKeyPEM: configuration.privateKeyPEM)
        }
        let (fd, port) = try Socket.listen(host: configuration.host, port: configuration.port)
        state.withLock {
            $0.listenFD = fd
            $0.port = port
            $0.running = true
        }
        let thread = Thread { self.acceptLoop(fd) }
        thread.name = "HTTP2Server accept :\(port)"
        thread.start()
    }

    /// The bound TCP port (valid after `start()`).
    public var port: Int { state.withLock { $0.port } }

    /// Replaces the injected faults; applies to streams that begin afterwards.
    public func setFaults(_ faults: HTTP2ServerFaults) { state.withLock { $0.faults = faults } }

    var faults: HTTP2ServerFaults { state.withLock { $0.faults } }

    /// Stops accepting, closes every connection (open streams are abandoned) and waits for
    /// all I/O threads to finish. Idempotent.
    public func stop() {
        let wasRunning = state.withLock { s -> Bool in
            defer { s.running = false }
            return s.running
        }
        guard wasRunning else { return }
        wake.signal()
        acceptDone.wait()
        let connections = state.withLock { Array($0.connections.values) }
        for connection in connections { connection.stop() }
        connectionThreads.wait()
    }

    private func acceptLoop(_ listenFD: Int32) {
        defer {
            Glibc.close(listenFD)
            acceptDone.signal()
        }
        while state.withLock({ $0.running }) {
            var fds = [
                pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)
            ]
            _ = poll(&fds, 2, 1000)
            if fds[1].revents != 0 { wake.drain() }
            guard fds[0].revents != 0 else { continue }
            let fd = accept(listenFD, nil, nil)
            if fd < 0 { continue }
            Socket.setNonBlocking(fd)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let connection = HTTP2ServerConnection(server: self, fd: fd)
            let key = ObjectIdentifier(connection)
            let accepted = state.withLock { s -> Bool in
                guard s.running else { return false }
                s.connections[key] = connection
                return true
            }
            guard accepted else { connection.transport.close(); continue }
            connectionThreads.enter()
            let thread = Thread {
                connection.run()
                self.state.withLock { _ = $0.connections.removeValue(forKey: key) }
                self.connectionThreads.leave()
            }
            thread.name = "HTTP2Server connection"
            thread.start()
        }
    }

    deinit {
        stop()
        if let context { SSL_CTX_free(context) }
    }
}
