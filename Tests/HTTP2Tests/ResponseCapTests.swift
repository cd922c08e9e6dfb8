import Crypto
import Foundation
import HTTP2
import XCTest

/// Every response body a client buffers is capped (64 KiB by default; docs/security.md
/// "Provider credentials"): a peer cannot make the dispatcher buffer without bound.
final class ResponseCapTests: XCTestCase {
    func testResponseBodiesOverTheCapFailTheRequestAndLeaveTheConnectionUsable() throws {
        try withConnection { _, connection in  // echoes the request body
            let atCap = SecureRandom.bytes(65_536)
            XCTAssertEqual(try connection.send(HTTP2Request(method: "POST", path: "/cap", body: atCap)).body, atCap, "exactly 64 KiB is fine")
            let over = attempt { try connection.send(HTTP2Request(method: "POST", path: "/cap", body: SecureRandom.bytes(65_537))) }
            guard case .failure(.possiblyProcessed(let reason)) = over else { return XCTFail("expected possiblyProcessed, got \(over)") }
            XCTAssertTrue(reason.contains("65536"), reason)
            let huge = attempt { try connection.send(HTTP2Request(method: "POST", path: "/cap", body: SecureRandom.bytes(2 * 1024 * 1024))) }
            guard case .failure(.possiblyProcessed) = huge else { return XCTFail("expected possiblyProcessed, got \(huge)") }
            // Only that stream was reset: the connection carries the next request.
            XCTAssertEqual(try connection.send(HTTP2Request(method: "POST", path: "/cap", body: Array("ok".utf8))).body, Array("ok".utf8))
        }
    }
}
