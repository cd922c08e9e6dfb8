import XCTest

@testable import HTTPServer

/// Pure helpers of the request path, without a server: the Content-Length parse, generated
/// request ids and the canonical path.
final class RequestHelpersTests: XCTestCase {
    func testContentLengthTakesDigitsBetweenSpacesAndTabsOnly() {
        XCTAssertEqual(HTTPServer.parseContentLength("0"), 0)
        XCTAssertEqual(HTTPServer.parseContentLength("4096"), 4096)
        XCTAssertEqual(HTTPServer.parseContentLength(" \t12\t "), 12)
        XCTAssertEqual(HTTPServer.parseContentLength("99999999999999999999999"), Int.max, "overflow is too large, not absent")
        for bad in ["", " ", "\t", "12abc", "1 2", "-1", "+1", "0x10", "\u{A0}12", "١٢"] {
            XCTAssertNil(HTTPServer.parseContentLength(bad), bad.debugDescription)
        }
    }

    func testGeneratedRequestIdsAreBase32WithEveryPositionRandom() {
        let alphabet = Set("abcdefghijklmnopqrstuvwxyz234567".utf8)
        var seen = Set<String>()
        var perPosition = [Set<UInt8>](repeating: [], count: 26)
        for _ in 0..<2000 {
            let id = RequestID.generate()
            XCTAssertTrue(id.hasPrefix("req_"))
            let body = Array(id.utf8.dropFirst(4))
            XCTAssertEqual(body.count, 26)
            XCTAssertTrue(body.allSatisfy(alphabet.contains), id)
            XCTAssertTrue(RequestID.isAcceptable(id))
            for (i, c) in body.enumerated() { perPosition[i].insert(c) }
            seen.insert(id)
        }
        XCTAssertEqual(seen.count, 2000, "no repeats in 2,000 ids of 130 bits")
        // 2,000 uniform draws of 32 symbols leave none unseen (each is missed with p ≈ 1e-27).
        for (i, symbols) in perPosition.enumerated() { XCTAssertEqual(symbols.count, 32, "position \(i)") }
    }

    func testCanonicalPathDecodesOnlySegmentsWithPercentEscapes() {
        XCTAssertEqual(HTTPRequest(method: "GET", path: "/v1/targets/abc").canonicalPath, "/v1/targets/abc")
        XCTAssertEqual(HTTPRequest(method: "GET", path: "/v1/targets/%61bc").canonicalPath, "/v1/targets/abc")
        XCTAssertEqual(HTTPRequest(method: "GET", path: "/v1/a%2Fb/c").canonicalPath, "/v1/a%2Fb/c", "an encoded slash stays inside its segment")
        XCTAssertEqual(HTTPRequest(method: "GET", path: "/v1/100%25/x").canonicalPath, "/v1/100%25/x")
    }
}
