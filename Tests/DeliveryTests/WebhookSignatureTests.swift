import Foundation
import XCTest
import Delivery

/// `LiveRelay-Signature` values (docs/webhooks.md), checked against Python's hmac/hashlib.
final class WebhookSignatureTests: XCTestCase {
    func testSignatureFormat() {
        let body = Array(#"{"id":"evt_1"}"#.utf8)
        XCTAssertEqual(
            WebhookSignature.v1(secret: "whsec_test", timestamp: 1_700_000_000, body: body),
            "c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925")  // Python hmac/hashlib
        let header = WebhookSignature.header(timestamp: 1_700_000_000, secrets: ["whsec_b", "whsec_a"], body: body)
        XCTAssertTrue(header.hasPrefix("t=1700000000,v1="))
        let now = Date(timeIntervalSince1970: 1_700_000_100)
        XCTAssertTrue(WebhookSignature.verify(header: header, secret: "whsec_a", body: body, now: now))
        XCTAssertTrue(WebhookSignature.verify(header: header, secret: "whsec_b", body: body, now: now))
        XCTAssertFalse(WebhookSignature.verify(header: header, secret: "whsec_c", body: body, now: now))
        XCTAssertFalse(WebhookSignature.verify(header: header, secret: "whsec_a", body: body + [0x20], now: now))
        XCTAssertFalse(WebhookSignature.verify(header: header, secret: "whsec_a", body: body, now: now.addingTimeInterval(300)), "too old")
    }
}
