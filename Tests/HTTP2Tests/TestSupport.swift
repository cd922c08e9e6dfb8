import Crypto
import Foundation
import HTTP2
import Locking
import XCTest
import LiveRelayTestSupport

/// Test PKI: a CA written to a temp file (the client's `extraCAFile`) and a server certificate
/// for localhost/127.0.0.1 signed by it. Generated once per process.
enum TestPKI {
    struct Material: Sendable {
        let ca: X509.Identity
        let server: X509.Identity
        let caFile: String
    }

    static let shared: Material = {
        let ca = try! X509.makeCertificateAuthority(commonName: "HTTP2Tests CA")
        let server = try! X509.issueServerCertificate(ca: ca, hosts: ["localhost", "127.0.0.1"])
        let file = NSTemporaryDirectory() + "http2tests-ca-\(getpid()).pem"
        try! ca.certificatePEM.write(toFile: file, atomically: true, encoding: .utf8)
        return Material(ca: ca, server: server, caFile: file)
    }()

    /// Writes `text` to a fresh temp file and returns its path.
    static func tempFile(_ name: String, _ text: String) -> String {
        let path = NSTemporaryDirectory() + "http2tests-\(getpid())-\(name)"
        try! text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

/// Every request the handler saw, by its `x-id` header, plus a gauge of concurrent handlers.
final class Recorder: Sendable {
    private let state = Locked<(ids: [String], inFlight: Int, peak: Int)>(([], 0, 0))

    func enter(_ request: HTTP2Request) {
        state.withLock { s in
            s.ids.append(request.header("x-id") ?? "?")
            s.inFlight += 1
            s.peak = max(s.peak, s.inFlight)
        }
    }

    func leave() { state.withLock { $0.inFlight -= 1 } }

    var received: [String] { state.withLock { $0.ids } }
    var peakConcurrency: Int { state.withLock { $0.peak } }
}

/// A started server answering 200 with the request body echoed and `x-echo-path`, after
/// `sleepSeconds`; stopped by the caller.
func startServer(
    recorder: Recorder = Recorder(), maxConcurrentStreams: Int = 1000, sleepSeconds: Double = 0,
    identity: X509.Identity = TestPKI.shared.server
) throws -> HTTP2Server {
    let config = HTTP2ServerConfiguration(
        certificatePEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM,
        maxConcurrentStreams: maxConcurrentStreams)
    let server = HTTP2Server(configuration: config) { request in
        recorder.enter(request)
        defer { recorder.leave() }
        if sleepSeconds > 0 { Thread.sleep(forTimeInterval: sleepSeconds) }
        return HTTP2Response(
            status: 200,
            headers: [
                ("x-echo-path", request.path), ("x-method", request.method),
                ("x-id", request.header("x-id") ?? "")
            ],
            body: request.body)
    }
    try server.start()
    return server
}

/// Starts a server (as `startServer`), applies `faults` when given, opens one connection to
/// it (`clientConfiguration`, `requestTimeout` in seconds) and runs `body` with both; closes
/// the connection, then stops the server, however `body` ends.
/// - Throws: what `startServer`, `HTTP2Connection(configuration:)` or `body` throws.
func withConnection(
    recorder: Recorder = Recorder(), maxConcurrentStreams: Int = 1000, sleepSeconds: Double = 0,
    faults: HTTP2ServerFaults? = nil, requestTimeout: Double = 10,
    _ body: (HTTP2Server, HTTP2Connection) throws -> Void
) throws {
    let server = try startServer(recorder: recorder, maxConcurrentStreams: maxConcurrentStreams, sleepSeconds: sleepSeconds)
    defer { server.stop() }
    if let faults { server.setFaults(faults) }
    let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port, requestTimeout: requestTimeout))
    defer { connection.close() }
    try body(server, connection)
}

/// Starts a server (as `startServer`) and a pool of at most `maxConnections` connections to it
/// and runs `body` with the pool; closes the pool, then stops the server, however `body` ends.
/// - Throws: what `startServer` or `body` throws.
func withPool(
    recorder: Recorder = Recorder(), maxConcurrentStreams: Int = 1000, sleepSeconds: Double = 0, maxConnections: Int,
    _ body: (HTTP2ConnectionPool) throws -> Void
) throws {
    let server = try startServer(recorder: recorder, maxConcurrentStreams: maxConcurrentStreams, sleepSeconds: sleepSeconds)
    defer { server.stop() }
    let pool = HTTP2ConnectionPool(configuration: clientConfiguration(port: server.port), maxConnections: maxConnections)
    defer { pool.close() }
    try body(pool)
}

func clientConfiguration(
    port: Int, host: String = "127.0.0.1", requestTimeout: Double = 10,
    caFile: String? = TestPKI.shared.caFile
) -> HTTP2ClientConfiguration {
    HTTP2ClientConfiguration(
        baseURL: URL(string: "https://\(host):\(port)")!, extraCAFile: caFile,
        connectTimeoutSeconds: 5, requestTimeoutSeconds: requestTimeout)
}

/// `send` as a `Result`, with the failure typed.
func attempt(_ body: () throws -> HTTP2Response) -> Result<HTTP2Response, HTTP2Failure> {
    do { return .success(try body()) } catch let failure as HTTP2Failure { return .failure(failure) } catch {
        return .failure(.possiblyProcessed(reason: "unexpected error \(error)"))
    }
}
