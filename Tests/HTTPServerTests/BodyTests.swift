import HTTPServer
import JSON
import XCTest

final class BodyTests: XCTestCase {
    private func echoServer() throws -> RunningServer {
        try startServer { router in
            router.add("POST", "/echo") { req in .json(200, .object(["bytes": .int(Int64(req.body.count))])) }
            router.add("POST", "/json") { req in .json(200, try req.jsonBody()) }
        }
    }

    func testBodyAtLimitAcceptedOneMoreRejected() throws {
        let s = try echoServer()
        let ok = try RawHTTPClient.request(port: s.port, method: "POST", path: "/echo", body: Array(repeating: 0x61, count: 65_536))
        XCTAssertEqual(ok.status, 200)
        XCTAssertEqual(ok.json?["bytes"], .int(65_536))

        let big = try RawHTTPClient.request(
            port: s.port, method: "POST", path: "/echo", headers: [("X-Request-Id", "big-1")],
            body: Array(repeating: 0x61, count: 65_537))
        XCTAssertEqual(big.status, 413)
        XCTAssertEqual(big.header("X-Request-Id"), "big-1")
        let error = big.json?["error"]
        XCTAssertEqual(error?["code"]?.stringValue, "PAYLOAD_TOO_LARGE")
        XCTAssertEqual(error?["details"], .object(["limit": .int(65_536), "actual": .int(65_537)]))
        XCTAssertEqual(error?["request_id"]?.stringValue, "big-1")
    }

    func testDeclaredHugeBodyRejectedWithoutSendingIt() throws {
        let s = try echoServer()
        let raw = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10000000\r\n\r\n"
        let r = try RawHTTPClient.exchange(port: s.port, raw: Array(raw.utf8))
        XCTAssertEqual(r.status, 413)
        XCTAssertEqual(r.json?["error"]?["details"]?["actual"], .int(10_000_000))
    }

    func testChunkedBodyLimitEnforced() throws {
        let s = try echoServer()
        let ok = try RawHTTPClient.chunked(port: s.port, method: "POST", path: "/echo", body: Array(repeating: 0x62, count: 65_536))
        XCTAssertEqual(ok.status, 200)
        XCTAssertEqual(ok.json?["bytes"], .int(65_536))
        let big = try RawHTTPClient.chunked(port: s.port, method: "POST", path: "/echo", body: Array(repeating: 0x62, count: 70_000))
        XCTAssertEqual(big.status, 413)
        XCTAssertEqual(big.json?["error"]?["code"]?.stringValue, "PAYLOAD_TOO_LARGE")
        XCTAssertEqual(big.json?["error"]?["details"]?["limit"], .int(65_536))
        XCTAssertGreaterThan(big.json?["error"]?["details"]?["actual"]?.intValue ?? 0, 65_536)
    }

    func testMalformedJSONBecomes400Envelope() throws {
        let s = try echoServer()
        for body in ["{\"a\":1,}", "", "[1,2", "\u{FEFF}{}"] {
            let r = try RawHTTPClient.request(port: s.port, method: "POST", path: "/json", body: Array(body.utf8))
            XCTAssertEqual(r.status, 400, body)
            let error = r.json?["error"]
            XCTAssertEqual(error?["code"]?.stringValue, "INVALID_REQUEST")
            XCTAssertTrue(error?["message"]?.stringValue?.hasPrefix("malformed JSON: ") ?? false)
            XCTAssertNil(error?["details"]?["field"])
            XCTAssertEqual(error?["request_id"]?.stringValue, r.header("X-Request-Id"))
        }
        let invalidUTF8 = try RawHTTPClient.request(port: s.port, method: "POST", path: "/json", body: [0x22, 0xFF, 0xFE, 0x22])
        XCTAssertEqual(invalidUTF8.status, 400)
        let good = try RawHTTPClient.request(port: s.port, method: "POST", path: "/json", body: Array("{\"k\":[1,true,null]}".utf8))
        XCTAssertEqual(good.status, 200)
        XCTAssertEqual(good.json, .object(["k": .array([.int(1), .bool(true), .null])]))
    }

    func testJSONBodyDepthLimitWithoutSockets() {
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        let request = HTTPRequest(
            method: "post", path: "/x", headers: ["Content-Type": "application/json"], body: Array(deep.utf8),
            requestId: "r1", pathParameters: [:], remoteAddress: nil)
        XCTAssertEqual(request.method, "POST")
        XCTAssertEqual(request.header("CONTENT-TYPE"), "application/json")
        XCTAssertThrowsError(try request.jsonBody()) { error in
            XCTAssertEqual((error as? HTTPError)?.status, 400)
            XCTAssertEqual((error as? HTTPError)?.code, "INVALID_REQUEST")
        }
    }

    func testMalformedFramingIsAnsweredByLibmicrohttpdAndLeaksNothing() throws {
        let s = try echoServer()
        let badLength = try RawHTTPClient.exchange(
            port: s.port, raw: Array("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\nConnection: close\r\n\r\n".utf8))
        XCTAssertEqual(badLength.status, 400)
        let hugeHeader = "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 40_000))\r\nConnection: close\r\n\r\n"
        XCTAssertEqual(try RawHTTPClient.exchange(port: s.port, raw: Array(hugeHeader.utf8)).status, 431)
        XCTAssertThrowsError(try RawHTTPClient.exchange(port: s.port, raw: Array("GARBAGE\r\n\r\n".utf8)))
        let keepAlive = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        XCTAssertEqual(try RawHTTPClient.exchange(port: s.port, raw: Array(keepAlive.utf8)).status, 200)
        // Per-request state is released in NOTIFY_COMPLETED for every one of them.
        let deadline = ContinuousClock.now + .seconds(5)
        while s.server.inFlight != 0, ContinuousClock.now < deadline { usleep(5_000) }
        XCTAssertEqual(s.server.inFlight, 0)
    }
}
