import Foundation
import XCTest
import HTTPServer
import JSON
@testable import LiveRelayAPI
import Logging
#if canImport(Glibc)
import Glibc
import LiveRelayTestSupport
#endif

/// docs/http-limits.md, "Long-polls": waits hold no worker thread and are capped per credential.
final class LongPollLimitTests: APITestCase {

    /// Sends one raw GET on a fresh connection; returns the socket (read the answer with `answer`).
    func send(_ path: String, as credential: String) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(env.api.server.port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { close(fd); throw FixtureFailure("connect to 127.0.0.1 failed (errno \(errno))") }
        let head = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(credential)\r\nConnection: close\r\n\r\n".utf8)
        _ = head.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        return fd
    }

    /// Reads the whole answer and closes `fd`; (status, error code).
    func answer(_ fd: Int32) -> (Int, String?) {
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            bytes += buffer[0..<n]
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? -1
        let body = text.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
        return (status, (try? JSONValue.parse(Array(body.utf8)))?["error"]?["code"]?.stringValue)
    }

    func testLongPollsAreCappedPerCredentialAtTheBoundary() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let path = "/v1/remote-updates/live-activities/targets/\(t)?wait_until_ready_ms=60000"
        let keyId = w.sender.id
        let cap = env.api.events.maxWaitsPerCredential
        var waiting: [Int32] = []
        for _ in 0..<cap { waiting.append(try send(path, as: w.sender.credential)) }
        let end = Date().addingTimeInterval(20)
        while env.api.events.waitsInProgress(credential: keyId) < cap, Date() < end { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertEqual(env.api.events.waitsInProgress(credential: keyId), cap, "\(cap) long-polls wait at once (no worker thread each)")
        // One more from the same credential is refused at once; other requests are served.
        let over = answer(try send(path, as: w.sender.credential))
        XCTAssertEqual(over.0, 429)
        XCTAssertEqual(over.1, "RATE_LIMITED")
        XCTAssertEqual(env.call("GET", "/v1/remote-updates/live-activities/targets/\(t)", as: w.sender.credential).status, 200)
        // The token arrives: every waiting long-poll answers 200.
        let put = env.call(
            "PUT", "/v1/installations/\(w.installationId)/targets/\(t)/push-token", ["token": "abcdef0123"],
            as: w.installationCredential)
        XCTAssertEqual(put.status / 100, 2, "token registered: \(put.status)")
        let statuses = waiting.map { answer($0).0 }
        XCTAssertEqual(statuses, Array(repeating: 200, count: cap))
        XCTAssertEqual(env.api.events.waitsInProgress(credential: keyId), 0)
    }
}

/// A packed notification (`Database.sendNotifications` joins the ids of one channel with
/// spaces) wakes the waiters of every id in it, and no others.
final class EventWaiterPayloadTests: XCTestCase {
    func testEveryIdOfAPackedPayloadWakesItsWaiters() {
        let ev = EventWaiter(log: Logger(minimum: .error, sink: { _ in }))
        let target = DispatchSemaphore(value: 0), operation = DispatchSemaphore(value: 0), other = DispatchSemaphore(value: 0)
        ev.waiters.withLock { $0 = ["tgt_a": [target], "op_b": [operation], "tgt_c": [other]] }
        ev.received(payload: "op_x tgt_a op_b")
        XCTAssertEqual(target.wait(timeout: .now()), .success)
        XCTAssertEqual(operation.wait(timeout: .now()), .success)
        XCTAssertEqual(other.wait(timeout: .now()), .timedOut, "an id not in the payload is not woken")
        ev.received(payload: "tgt_c")
        XCTAssertEqual(other.wait(timeout: .now()), .success, "a single id is a payload too")
    }
}
