import Foundation
@testable import HTTP2
import XCTest

/// A connection whose stream ids run out (RFC 9113 §5.1.1: a client's ids are odd and at most
/// 2^31 − 1) stops taking requests, and the pool moves to a new connection instead of failing
/// every later request on the exhausted one.
final class StreamIDTests: XCTestCase {
    func testAConnectionOutOfStreamIdsIsReplacedByThePool() throws {
        let server = try startServer()
        defer { server.stop() }
        var configuration = clientConfiguration(port: server.port)
        configuration.firstStreamID = 2_147_483_645  // two ids left per connection: 2^31 − 3 and 2^31 − 1
        let pool = HTTP2ConnectionPool(configuration: configuration, maxConnections: 1)
        defer { pool.close() }
        func get(_ i: Int) -> Result<HTTP2Response, HTTP2Failure> {
            attempt { try pool.send(HTTP2Request(method: "GET", path: "/\(i)")) }
        }
        for i in 0..<2 { XCTAssertEqual(try get(i).get().status, 200, "request \(i)") }
        guard case .failure(.notProcessed(let reason)) = get(2) else { return XCTFail("the third request has no stream id left") }
        XCTAssertTrue(reason.contains("cannot submit request"), reason)
        for i in 3..<5 { XCTAssertEqual(try get(i).get().status, 200, "request \(i) went to a new connection") }
        XCTAssertEqual(pool.connectionCount, 1)
    }
}
