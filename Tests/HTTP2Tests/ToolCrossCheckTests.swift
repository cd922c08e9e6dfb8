import Foundation
import HTTP2
import XCTest

/// Smoke tests against nghttp2's own tools (Debian `nghttp2-server`/`nghttp2-client`):
/// our client against `nghttpd`, our server against `h2load`. A missing tool fails the test
/// (deploy/local/test installs both packages).
final class ToolCrossCheckTests: XCTestCase {
    private func tool(_ name: String) throws -> String {
        for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        throw ToolMissing(name: name)
    }

    private func freePort() throws -> Int {
        let probe = try startServer()
        let port = probe.port
        probe.stop()
        return port
    }

    func testClientAgainstNghttpd() throws {
        let nghttpd = try tool("nghttpd")
        let docs = NSTemporaryDirectory() + "http2tests-docs-\(getpid())"
        try FileManager.default.createDirectory(atPath: docs, withIntermediateDirectories: true)
        let content = String(repeating: "hello from nghttpd\n", count: 5000)  // ~95 KB: several DATA frames
        try content.write(toFile: docs + "/hello.txt", atomically: true, encoding: .utf8)
        let key = TestPKI.tempFile("nghttpd-key.pem", TestPKI.shared.server.privateKeyPEM)
        let cert = TestPKI.tempFile("nghttpd-cert.pem", TestPKI.shared.server.certificatePEM)
        let port = try freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nghttpd)
        process.arguments = ["--address=127.0.0.1", "--htdocs=\(docs)", String(port), key, cert]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { process.terminate(); process.waitUntilExit() }
        var connection: HTTP2Connection?
        for _ in 0..<100 where connection == nil {
            var config = clientConfiguration(port: port)
            config.maxResponseBodyBytes = 1 << 20  // the ~95 KB document is over the 64 KiB default
            connection = try? HTTP2Connection(configuration: config)
            if connection == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        guard let connection else { return XCTFail("cannot connect to nghttpd on \(port)") }
        defer { connection.close() }
        let response = try connection.send(HTTP2Request(path: "/hello.txt"))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(String(decoding: response.body, as: UTF8.self), content)
        XCTAssertEqual(try connection.send(HTTP2Request(path: "/missing")).status, 404)
    }

    func testServerAgainstH2load() throws {
        let h2load = try tool("h2load")
        let recorder = Recorder()
        let server = try startServer(recorder: recorder, maxConcurrentStreams: 10)
        defer { server.stop() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: h2load)
        process.arguments = [
            "-n", "200", "-c", "2", "-m", "10", "-d", TestPKI.tempFile("h2load-body", "x=1"),
            "https://127.0.0.1:\(server.port)/load"
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("200 succeeded"), text)
        XCTAssertTrue(text.contains("TLS Protocol: TLSv1.3") || text.contains("TLS Protocol: TLSv1.2"), text)
        XCTAssertEqual(recorder.received.count, 200)
        XCTAssertLessThanOrEqual(recorder.peakConcurrency, 20, "2 clients × 10 streams each (-m 10 = the announced limit)")
    }
}

/// A tool the cross-check needs is not installed: the fixture fails rather than skipping.
struct ToolMissing: Error, CustomStringConvertible {
    let name: String
    var description: String { "\(name) is not installed (Debian nghttp2-server / nghttp2-client; deploy/local/test installs them)" }
}
