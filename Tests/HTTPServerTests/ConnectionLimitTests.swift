import Foundation
import HTTPServer
import Locking
import XCTest
#if canImport(Glibc)
import Glibc
import LiveRelayTestSupport
#endif

/// docs/http-limits.md: idle connections cost no thread, a per-address cap, an absolute
/// read deadline (slowloris), 503 from a full server.
final class ConnectionLimitTests: XCTestCase {
    /// A blocking TCP connection from loopback source `source` (any 127.0.0.0/8 address) to
    /// 127.0.0.1:`port`, with a receive timeout of `timeoutSeconds`.
    static func connect(port: Int, source: String = "127.0.0.1", timeoutSeconds: Int = 10) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPError(description: "socket failed", errno: errno) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var rc = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { let e = errno; close(fd); throw RawHTTPError(description: "bind \(source) failed", errno: e) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { let e = errno; close(fd); throw RawHTTPError(description: "connect failed", errno: e) }
        return fd
    }

    static func send(_ fd: Int32, _ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// Reads until the peer closes (or the receive timeout); the bytes read.
    static func readAll(_ fd: Int32) -> [UInt8] { RawHTTPClient.readAll(fd, bufferSize: 16_384) }

    /// A server answering `GET /ping` with `200 pong`.
    func startPingServer(_ configuration: HTTPServerConfiguration) throws -> RunningServer {
        try startServer({ r in r.add("GET", "/ping") { _ in .text(200, "pong") } }, configuration: configuration)
    }

    /// One `Connection: close` request on a fresh connection from `source`.
    static func get(port: Int, path: String, source: String = "127.0.0.1") throws -> RawResponse {
        let fd = try connect(port: port, source: source)
        defer { close(fd) }
        _ = send(fd, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return try RawHTTPClient.parse(readAll(fd))
    }

    func testTwoThousandIdleConnectionsDoNotStopALegitimateRequest() throws {
        let s = try startPingServer(.init(port: 0, threads: 2, maxThreads: 4))
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        // 8 source addresses × 250 connections: under the per-address cap (256).
        for i in 0..<2_000 {
            held.append(try Self.connect(port: s.port, source: "127.0.0.\(2 + i % 8)"))
        }
        XCTAssertTrue(
            waitUntil(within: 10, every: 0.01) { s.server.openConnections >= 2_000 },
            "the server holds every idle connection (\(s.server.openConnections))")
        for _ in 0..<20 {
            let r = try Self.get(port: s.port, path: "/ping")
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(r.text, "pong")
        }
        XCTAssertGreaterThanOrEqual(s.server.openConnections, 2_000, "idle connections stay open while others are served")
    }

    func testPerAddressConnectionCap() throws {
        let s = try startPingServer(.init(port: 0, threads: 2, maxConnectionsPerAddress: 4))
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<3 { held.append(try Self.connect(port: s.port, source: "127.0.0.3")) }
        XCTAssertTrue(waitUntil(within: 5, every: 0.01) { s.server.openConnections == 3 })
        // The 4th connection from that address is at the cap: still served.
        XCTAssertEqual(try Self.get(port: s.port, path: "/ping", source: "127.0.0.3").status, 200)
        held.append(try Self.connect(port: s.port, source: "127.0.0.3"))
        XCTAssertTrue(waitUntil(within: 5, every: 0.01) { s.server.openConnections == 4 })
        // A 5th is closed without an answer.
        let fd = try Self.connect(port: s.port, source: "127.0.0.3")
        defer { close(fd) }
        _ = Self.send(fd, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        XCTAssertEqual(Self.readAll(fd), [], "a connection over the per-address cap gets no response")
        // Another address is unaffected.
        XCTAssertEqual(try Self.get(port: s.port, path: "/ping", source: "127.0.0.4").status, 200)
    }

    func testSlowlorisIsCutOffAtTheReadDeadline() throws {
        let s = try startPingServer(.init(port: 0, threads: 2, connectionTimeoutSeconds: 30, requestReadTimeoutSeconds: 1))
        let fd = try Self.connect(port: s.port)
        defer { close(fd) }
        let start = Date()
        XCTAssertTrue(Self.send(fd, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
        // One header line every 100 ms, for up to 6 s: each byte resets libmicrohttpd's idle timer (30 s).
        var sentLines = 0
        var closedByServer = false
        while Date().timeIntervalSince(start) < 6 {
            Thread.sleep(forTimeInterval: 0.1)
            if !Self.send(fd, "X-Drip-\(sentLines): a\r\n") { closedByServer = true; break }
            sentLines += 1
            var probe: UInt8 = 0
            let n = recv(fd, &probe, 1, Int32(MSG_DONTWAIT))
            if n == 0 { closedByServer = true; break }
        }
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertTrue(closedByServer, "a client dribbling header bytes was never cut off (\(sentLines) lines sent)")
        XCTAssertGreaterThanOrEqual(elapsed, 1.0, "cut off before its 1 s deadline")
        XCTAssertEqual(s.server.connectionsCutOff, 1)
        // A normal request on another connection is unaffected, and an idle connection is not
        // cut off by the read deadline (only by the idle timeout).
        let idle = try Self.connect(port: s.port)
        defer { close(idle) }
        XCTAssertEqual(try Self.get(port: s.port, path: "/ping").status, 200)
        Thread.sleep(forTimeInterval: 1.6)
        XCTAssertTrue(Self.send(idle, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
        XCTAssertEqual(try RawHTTPClient.parse(Self.readAll(idle)).status, 200, "an idle connection outlives the read deadline")
        XCTAssertEqual(s.server.connectionsCutOff, 1)
    }

    func testFullServerAnswers503AtTheConnectionLimit() throws {
        let s = try startPingServer(.init(port: 0, threads: 2, maxConnections: 3))
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<2 { held.append(try Self.connect(port: s.port)) }
        XCTAssertTrue(waitUntil(within: 5, every: 0.01) { s.server.openConnections == 2 })
        XCTAssertEqual(try Self.get(port: s.port, path: "/ping").status, 200, "the 3rd connection is within the limit")
        held.append(try Self.connect(port: s.port))
        XCTAssertTrue(waitUntil(within: 5, every: 0.01) { s.server.openConnections == 3 })
        let r = try Self.get(port: s.port, path: "/ping")
        XCTAssertEqual(r.status, 503)
        XCTAssertEqual(r.json?["error"]?["code"]?.stringValue, "SERVICE_UNAVAILABLE")
        XCTAssertEqual(r.header("retry-after"), "1")
        XCTAssertNotNil(r.json?["error"]?["request_id"]?.stringValue)
    }

    func testFullQueueAnswers503() throws {
        let release = DispatchSemaphore(value: 0)
        let s = try startServer(
            { r in
                r.add("GET", "/block") { _ in
                    release.wait(); return .text(200, "done")
                }
                r.add("GET", "/ping") { _ in .text(200, "pong") }
            }, configuration: .init(port: 0, threads: 1, maxThreads: 1, maxQueuedRequests: 1))
        let port = s.port
        let group = DispatchGroup()
        let statuses = Locked<[Int]>([])
        for _ in 0..<2 {  // one runs (and blocks), one waits in the queue
            DispatchQueue.global().async(group: group) {
                let status = (try? Self.get(port: port, path: "/block").status) ?? -1
                statuses.withLock { $0.append(status) }
            }
            Thread.sleep(forTimeInterval: 0.3)
        }
        let r = try Self.get(port: port, path: "/ping")
        XCTAssertEqual(r.status, 503, "a request beyond the queue is refused at once")
        XCTAssertEqual(r.json?["error"]?["code"]?.stringValue, "SERVICE_UNAVAILABLE")
        XCTAssertEqual(r.header("retry-after"), "1")
        release.signal()
        release.signal()
        group.wait()
        XCTAssertEqual(statuses.withLock { $0 }, [200, 200])
        XCTAssertEqual(try Self.get(port: port, path: "/ping").status, 200)
    }

    func testDeferredResponseHoldsNoWorker() throws {
        let pending = Locked<[ResponseCompletion]>([])
        let s = try startServer(
            { r in
                r.add("GET", "/wait") { _ in .deferred { c in pending.withLock { $0.append(c) } } }
                r.add("GET", "/ping") { _ in .text(200, "pong") }
            }, configuration: .init(port: 0, threads: 1, maxThreads: 1))
        let port = s.port
        let group = DispatchGroup()
        let bodies = Locked<[String]>([])
        for _ in 0..<5 {
            DispatchQueue.global().async(group: group) {
                let text = (try? Self.get(port: port, path: "/wait").text) ?? "error"
                bodies.withLock { $0.append(text) }
            }
        }
        XCTAssertTrue(waitUntil(within: 5, every: 0.01) { pending.withLock { $0.count } == 5 })
        // Five waits are parked on a one-worker server, which still answers at once.
        XCTAssertEqual(try Self.get(port: port, path: "/ping").status, 200)
        for (i, c) in pending.withLock({ $0 }).enumerated() {
            c.complete { .text(200, "done \(i)") }
            c.complete { .text(500, "twice") }  // ignored
        }
        group.wait()
        XCTAssertEqual(bodies.withLock { $0.sorted() }, (0..<5).map { "done \($0)" })
    }
}
