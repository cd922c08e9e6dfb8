import Crypto
import Foundation
import HTTP2
import XCTest
import LiveRelayTestSupport

/// Client ↔ server over real TLS on loopback.
final class ClientServerTests: XCTestCase {
    func testPostRoundTripWithHeadersAndBody() throws {
        let recorder = Recorder()
        try withConnection(recorder: recorder) { _, connection in
            XCTAssertTrue(connection.isUsable)
            let body = Array(#"{"aps":{"event":"update"}}"#.utf8)
            let response = try connection.send(
                HTTP2Request(
                    method: "POST", path: "/3/device/abc?x=1",
                    headers: [("X-Id", "one"), ("apns-push-type", "liveactivity")],
                    body: body))
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.body, body)
            XCTAssertEqual(response.header("X-Echo-Path"), "/3/device/abc?x=1")
            XCTAssertEqual(response.header("x-method"), "POST")
            XCTAssertEqual(response.header("content-length"), String(body.count))
            XCTAssertEqual(recorder.received, ["one"])
            // A second request on the same connection, without a body.
            let second = try connection.send(HTTP2Request(method: "GET", path: "/", headers: [("x-id", "two")]))
            XCTAssertEqual(second.status, 200)
            XCTAssertEqual(second.body, [])
        }
    }

    func testConcurrentRequestsRespectMaxConcurrentStreams() throws {
        let recorder = Recorder()
        try withConnection(recorder: recorder, maxConcurrentStreams: 10, sleepSeconds: 0.005) { _, connection in
            XCTAssertEqual(connection.maxConcurrentStreams, 10)
            let results = concurrently(200, threads: 16) { i in
                attempt {
                    try connection.send(
                        HTTP2Request(
                            method: "POST", path: "/n/\(i)", headers: [("x-id", "\(i)")],
                            body: Array("payload \(i)".utf8)))
                }
            }
            for (i, result) in results.enumerated() {
                guard case .success(let response) = result else { return XCTFail("request \(i): \(result)") }
                XCTAssertEqual(response.header("x-echo-path"), "/n/\(i)")
                XCTAssertEqual(response.body, Array("payload \(i)".utf8))
            }
            XCTAssertEqual(recorder.received.count, 200)
            XCTAssertEqual(Set(recorder.received).count, 200)
            XCTAssertLessThanOrEqual(recorder.peakConcurrency, 10)
            XCTAssertGreaterThan(recorder.peakConcurrency, 1, "requests should be multiplexed")
        }
    }

    func testLargeBodiesRoundTripThroughFlowControl() throws {
        let server = try startServer()
        defer { server.stop() }
        var config = clientConfiguration(port: server.port)
        config.maxResponseBodyBytes = 4 * 1024 * 1024  // the echo answers with the 3 MiB body
        let connection = try HTTP2Connection(configuration: config)
        defer { connection.close() }
        let body = SecureRandom.bytes(3 * 1024 * 1024 + 17)
        let response = try connection.send(HTTP2Request(method: "POST", path: "/big", body: body))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.body.count, body.count)
        XCTAssertEqual(response.body, body)
        let small = SecureRandom.bytes(70 * 1024)
        XCTAssertEqual(try connection.send(HTTP2Request(method: "POST", path: "/big", body: small)).body, small)
    }

    func testCertificateForAnotherHostFailsWithTLS() throws {
        let other = try X509.issueServerCertificate(ca: TestPKI.shared.ca, hosts: ["push.example.com"])
        let server = try startServer(identity: other)
        defer { server.stop() }
        XCTAssertThrowsError(try HTTP2Connection(configuration: clientConfiguration(port: server.port))) { error in
            guard case HTTP2Failure.tls(let text) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(text.contains("verif"), text)
        }
        // Also rejected when connecting by DNS name (SNI + DNS SAN check).
        let wrongName = clientConfiguration(port: server.port, host: "localhost")
        XCTAssertThrowsError(try HTTP2Connection(configuration: wrongName))
    }

    func testUntrustedCAFailsWithTLS() throws {
        let stranger = try X509.makeCertificateAuthority(commonName: "Stranger CA")
        let identity = try X509.issueServerCertificate(ca: stranger, hosts: ["127.0.0.1"])
        let server = try startServer(identity: identity)
        defer { server.stop() }
        XCTAssertThrowsError(try HTTP2Connection(configuration: clientConfiguration(port: server.port))) { error in
            guard case HTTP2Failure.tls = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try HTTP2Connection(configuration: clientConfiguration(port: server.port, caFile: nil))) { error in
            guard case HTTP2Failure.tls = error else { return XCTFail("\(error)") }
        }
    }

    func testKeepalivePingsKeepAnIdleConnectionUsable() throws {
        let server = try startServer()
        defer { server.stop() }
        var config = clientConfiguration(port: server.port)
        config.pingIntervalSeconds = 0.1
        let connection = try HTTP2Connection(configuration: config)
        defer { connection.close() }
        Thread.sleep(forTimeInterval: 0.8)  // several PING/ACK rounds while idle
        XCTAssertTrue(connection.isUsable)
        XCTAssertEqual(try connection.send(HTTP2Request(path: "/after-idle")).status, 200)
    }

    func testServerStopEndsClientConnection() throws {
        let server = try startServer()
        let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port))
        defer { connection.close() }
        XCTAssertEqual(try connection.send(HTTP2Request(path: "/")).status, 200)
        server.stop()  // GOAWAY NO_ERROR, then close
        let deadline = Date().addingTimeInterval(5)
        while connection.isUsable && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertFalse(connection.isUsable)
        guard case .failure(.notProcessed) = attempt({ try connection.send(HTTP2Request(path: "/")) }) else {
            return XCTFail("a request on a closed connection must be notProcessed")
        }
    }

    func testConnectFailureIsNotProcessed() throws {
        let server = try startServer()
        let port = server.port
        server.stop()
        XCTAssertThrowsError(try HTTP2Connection(configuration: clientConfiguration(port: port))) { error in
            guard case HTTP2Failure.notProcessed = error else { return XCTFail("\(error)") }
        }
    }

    func testPoolSpreadsLoadAndReconnects() throws {
        let recorder = Recorder()
        try withPool(recorder: recorder, maxConcurrentStreams: 5, sleepSeconds: 0.02, maxConnections: 3) { pool in
            let results = concurrently(60, threads: 15) { i in
                attempt { try pool.send(HTTP2Request(method: "POST", path: "/p", headers: [("x-id", "\(i)")])) }
            }
            XCTAssertTrue(results.allSatisfy { if case .success = $0 { return true } else { return false } }, "\(results)")
            XCTAssertGreaterThan(pool.connectionCount, 1)
            XCTAssertLessThanOrEqual(pool.connectionCount, 3)
            XCTAssertEqual(Set(recorder.received).count, 60)
        }
    }
}
