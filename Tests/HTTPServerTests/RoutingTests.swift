import HTTPServer
import JSON
import XCTest

final class RoutingTests: XCTestCase {
    private func envelope(_ r: RawResponse) -> [String: JSONValue]? { r.json?["error"]?.objectValue }

    func testRoutesWithParametersAndLiteralPrecedence() throws {
        let s = try startServer { router in
            router.add("GET", "/v1/installations/{id}/targets/{tgt}") { req in
                .json(
                    200,
                    .object([
                        "id": .string(req.pathParameters["id"] ?? ""), "tgt": .string(req.pathParameters["tgt"] ?? ""),
                        "route": .string(req.route ?? ""), "q": .string(req.query["a"] ?? "")
                    ]))
            }
            router.add("GET", "/v1/installations/{id}") { _ in .text(200, "param") }
            router.add("GET", "/v1/installations/new") { _ in .text(200, "literal") }
        }
        let r = try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/ins%201/targets/tgt_9?a=x+y%21&a=second")
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(
            r.json,
            .object(["id": .string("ins 1"), "tgt": .string("tgt_9"), "route": .string("/v1/installations/{id}/targets/{tgt}"), "q": .string("x y!")])
        )
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/new").text, "literal")
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/ins_2").text, "param")
        XCTAssertNotNil(r.header("X-Request-Id"))
    }

    /// Routes without placeholders are found by one lookup of the exact path; every other
    /// spelling of such a path takes the full match and ends at the same route: a
    /// percent-encoded literal, HEAD falling back to GET, another method (405 with `Allow`), a
    /// trailing slash (404).
    func testLiteralRoutesMatchAsTheFullMatchDoes() throws {
        let s = try startServer { router in
            router.add("GET", "/v1/installations/{id}") { _ in .text(200, "param") }
            router.add("GET", "/v1/installations/new") { req in .text(200, "literal \(req.route ?? "-") \(req.pathParameters.count)") }
        }
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/new").text, "literal /v1/installations/new 0")
        XCTAssertEqual(
            try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/ne%77").text, "literal /v1/installations/new 0")
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "HEAD", path: "/v1/installations/new").status, 200)
        let post = try RawHTTPClient.request(port: s.port, method: "POST", path: "/v1/installations/new", body: Array("{}".utf8))
        XCTAssertEqual(post.status, 405)
        XCTAssertEqual(post.header("Allow"), "GET, HEAD")
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/new/").status, 404)
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/v1/installations/old").text, "param")
    }

    func testNotFoundAndMethodNotAllowed() throws {
        let s = try startServer { router in
            router.add("GET", "/things/{id}") { _ in .text(200, "get") }
            router.add("DELETE", "/things/{id}") { _ in .text(204, "") }
        }
        let missing = try RawHTTPClient.request(port: s.port, method: "GET", path: "/nothing/here")
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual(envelope(missing)?["code"]?.stringValue, "NOT_FOUND")
        XCTAssertEqual(envelope(missing)?["request_id"]?.stringValue, missing.header("x-request-id"))
        XCTAssertEqual(envelope(missing)?["details"], .object([:]))

        let wrong = try RawHTTPClient.request(port: s.port, method: "POST", path: "/things/1", body: Array("{}".utf8))
        XCTAssertEqual(wrong.status, 405)
        XCTAssertEqual(envelope(wrong)?["code"]?.stringValue, "METHOD_NOT_ALLOWED")
        XCTAssertEqual(wrong.header("Allow"), "DELETE, GET, HEAD")
        XCTAssertEqual(wrong.header("Content-Type"), "application/json")
    }

    func testRouterListsRoutes() {
        let router = Router()
        router.add("get", "/a") { _ in .text(200, "") }
        router.add("POST", "/b/{x}") { _ in .text(200, "") }
        XCTAssertEqual(router.routes.map { "\($0.method) \($0.pattern)" }, ["GET /a", "POST /b/{x}"])
    }

    func testRequestIdEchoedWhenSaneReplacedWhenNot() throws {
        let s = try startServer { router in
            router.add("GET", "/id") { req in .text(200, req.requestId) }
        }
        let sane = try RawHTTPClient.request(port: s.port, method: "GET", path: "/id", headers: [("X-Request-Id", "client.id:42-ok_")])
        XCTAssertEqual(sane.header("X-Request-Id"), "client.id:42-ok_")
        XCTAssertEqual(sane.text, "client.id:42-ok_")

        let insane = try RawHTTPClient.request(port: s.port, method: "GET", path: "/id", headers: [("X-Request-Id", "bad id<script>")])
        let generated = try XCTUnwrap(insane.header("X-Request-Id"))
        XCTAssertTrue(generated.wholeMatch(of: /req_[a-z2-7]{26}/) != nil, generated)
        XCTAssertEqual(insane.text, generated)

        let tooLong = try RawHTTPClient.request(
            port: s.port, method: "GET", path: "/id", headers: [("X-Request-Id", String(repeating: "a", count: 129))])
        XCTAssertTrue(tooLong.header("X-Request-Id")!.hasPrefix("req_"))
        let missing = try RawHTTPClient.request(port: s.port, method: "GET", path: "/nowhere", headers: [("X-Request-Id", "trace-1")])
        XCTAssertEqual(missing.header("X-Request-Id"), "trace-1")
    }

    func testNonHTTPErrorBecomesOpaque500() throws {
        struct SecretFailure: Error { let detail = "password=hunter2 at db.internal:5432" }
        let s = try startServer { router in
            router.add("GET", "/boom") { _ in throw SecretFailure() }
            router.add("GET", "/teapot") { _ in
                throw HTTPError(status: 418, code: "TEAPOT", message: "short and stout", details: ["field": .string("spout")])
            }
        }
        let r = try RawHTTPClient.request(port: s.port, method: "GET", path: "/boom")
        XCTAssertEqual(r.status, 500)
        XCTAssertEqual(envelope(r)?["code"]?.stringValue, "INTERNAL")
        XCTAssertEqual(envelope(r)?["message"]?.stringValue, "internal error")
        XCTAssertEqual(envelope(r)?["request_id"]?.stringValue, r.header("X-Request-Id"))
        XCTAssertFalse(r.text.contains("hunter2"))
        XCTAssertFalse(r.text.contains("SecretFailure"))
        XCTAssertTrue(s.log.lines.contains { $0.contains("handler error") && $0.contains("hunter2") }, "the error is logged")

        let t = try RawHTTPClient.request(port: s.port, method: "GET", path: "/teapot")
        XCTAssertEqual(t.status, 418)
        XCTAssertEqual(envelope(t)?["details"], .object(["field": .string("spout")]))
    }
}
