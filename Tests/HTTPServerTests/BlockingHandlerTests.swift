import Foundation
import HTTPServer
import XCTest
import LiveRelayTestSupport

/// Handlers block (database calls, long-polls of up to 60 s): one slow request must never hold
/// up another connection's request. In libmicrohttpd's thread-pool mode it did (a connection is
/// polled by the pool thread that accepted it), found by deploy/faults/run.
final class BlockingHandlerTests: XCTestCase {
    func testSlowHandlersDoNotStallOtherConnections() throws {
        let s = try startServer(
            { r in
                r.add("GET", "/slow") { _ in
                    Thread.sleep(forTimeInterval: 3); return .text(200, "slow")
                }
                r.add("GET", "/fast") { _ in .text(200, "fast") }
            }, configuration: .init(port: 0, threads: 2))
        let port = s.port
        let group = DispatchGroup()
        for _ in 0..<6 {
            DispatchQueue.global().async(group: group) { _ = try? RawHTTPClient.request(port: port, method: "GET", path: "/slow") }
        }
        eventually("slow requests occupy both worker threads", within: 10) { s.server.inFlight >= 2 }
        let start = Date()
        let fast = try RawHTTPClient.request(port: port, method: "GET", path: "/fast")
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(fast.status, 200)
        XCTAssertLessThan(elapsed, 1.5, "a fast request waited \(elapsed) s behind slow handlers")
        group.wait()
    }
}
