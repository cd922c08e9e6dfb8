import HTTPServer
import JSON
import Metrics
import XCTest

final class ObservabilityTests: XCTestCase {
    /// Checks every line against the grammar of the text format 0.0.4 (HELP, TYPE, sample).
    static func assertValidExposition(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        let helpLine = /# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*/
        let typeLine = /# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)/
        let sampleLine =
            /[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")*\})? (NaN|[+-]Inf|-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)/
        XCTAssertTrue(text.hasSuffix("\n"), file: file, line: line)
        for l in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            let ok = l.wholeMatch(of: helpLine) != nil || l.wholeMatch(of: typeLine) != nil || l.wholeMatch(of: sampleLine) != nil
            XCTAssertTrue(ok, "not a valid exposition line: \(l)", file: file, line: line)
        }
    }

    func testRegistryRendersAllKindsWithEscaping() {
        let registry = MetricsRegistry()
        let counter = registry.counter("jobs_total", help: "Jobs done.\nSecond \\ line", labels: ["kind"])
        counter.increment(["a\"b\\c\nd"])
        counter.increment(["plain"], by: 2.5)
        counter.increment(["plain"], by: -1)  // ignored: counters never decrease
        counter.increment(["too", "many"])  // ignored: wrong label count
        registry.gauge("queue_depth", help: "Queued.", labels: ["queue"]) { [(["push"], 3), (["bad", "arity"], 1)] }
        registry.gauge("up", help: "Up.") { [([], 1)] }
        let h = registry.histogram("latency_seconds", help: "Latency.", labels: ["op"], buckets: [0.1, 1, 0.5])
        h.observe(["x"], 0.05)
        h.observe(["x"], 0.7)
        h.observe(["x"], 30)
        XCTAssertTrue(registry.counter("jobs_total", help: "again", labels: ["kind"]) === counter)

        let text = registry.render()
        Self.assertValidExposition(text)
        XCTAssertTrue(text.contains("# HELP jobs_total Jobs done.\\nSecond \\\\ line\n# TYPE jobs_total counter\n"))
        XCTAssertTrue(text.contains("jobs_total{kind=\"a\\\"b\\\\c\\nd\"} 1\n"))
        XCTAssertTrue(text.contains("jobs_total{kind=\"plain\"} 2.5\n"))
        XCTAssertTrue(text.contains("queue_depth{queue=\"push\"} 3\n"))
        XCTAssertFalse(text.contains("arity"))
        XCTAssertTrue(text.contains("up 1\n"))
        XCTAssertTrue(
            text.contains(
                """
                latency_seconds_bucket{op="x",le="0.1"} 1
                latency_seconds_bucket{op="x",le="0.5"} 1
                latency_seconds_bucket{op="x",le="1"} 2
                latency_seconds_bucket{op="x",le="+Inf"} 3
                latency_seconds_sum{op="x"} 30.75
                latency_seconds_count{op="x"} 3

                """), text)
    }

    func testServerCountsRequestsInMetrics() throws {
        let s = try startServer { router in
            router.add("GET", "/items/{id}") { _ in .text(200, "ok") }
        }
        for _ in 0..<3 { _ = try RawHTTPClient.request(port: s.port, method: "GET", path: "/items/7") }
        _ = try RawHTTPClient.request(port: s.port, method: "GET", path: "/missing")
        _ = try RawHTTPClient.request(port: s.port, method: "BREW", path: "/items/7")
        let text = s.metrics.render()
        Self.assertValidExposition(text)
        XCTAssertTrue(text.contains("http_requests_total{route=\"/items/{id}\",method=\"GET\",status=\"200\"} 3\n"), text)
        XCTAssertTrue(text.contains("http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1\n"), text)
        XCTAssertTrue(text.contains("http_requests_total{route=\"/items/{id}\",method=\"OTHER\",status=\"405\"} 1\n"), text)
        XCTAssertTrue(text.contains("# TYPE http_request_duration_seconds histogram\n"))
        XCTAssertTrue(text.contains("http_request_duration_seconds_bucket{route=\"/items/{id}\",method=\"GET\",le=\"0.001\"}"))
        XCTAssertTrue(text.contains("http_request_duration_seconds_bucket{route=\"/items/{id}\",method=\"GET\",le=\"+Inf\"} 3\n"))
        XCTAssertTrue(text.contains("http_request_duration_seconds_count{route=\"/items/{id}\",method=\"GET\"} 3\n"))
    }

    func testAccessLogOffWritesNoLineButStillCounts() throws {
        var configuration = HTTPServerConfiguration(port: 0, threads: 2)
        configuration.accessLog = false
        let s = try startServer({ router in router.add("GET", "/ping") { _ in .text(200, "ok") } }, configuration: configuration)
        for _ in 0..<2 { _ = try RawHTTPClient.request(port: s.port, method: "GET", path: "/ping") }
        XCTAssertFalse(s.log.lines.contains { $0.contains("\"msg\":\"request\"") }, "no access-log line: \(s.log.lines)")
        XCTAssertTrue(s.metrics.render().contains("http_requests_total{route=\"/ping\",method=\"GET\",status=\"200\"} 2\n"))
    }

    func testAccessLogLineIsJSONWithoutSecrets() throws {
        let s = try startServer { router in
            router.add("POST", "/v1/things/{id}") { req in .json(201, .object(["ok": .bool(true), "n": .int(Int64(req.body.count))])) }
        }
        let body = Array("{\"secret_field\":\"BODYSECRET\"}".utf8)
        let r = try RawHTTPClient.request(
            port: s.port, method: "POST", path: "/v1/things/t1?token=QUERYSECRET",
            headers: [("Authorization", "Bearer lrs_abc_AUTHSECRET"), ("X-Request-Id", "log-test-1")], body: body)
        XCTAssertEqual(r.status, 201)
        let lines = s.log.lines.filter { $0.contains("log-test-1") }
        XCTAssertEqual(lines.count, 1, "\(s.log.lines)")
        let line = try XCTUnwrap(lines.first)
        for secret in ["AUTHSECRET", "BODYSECRET", "QUERYSECRET", "Bearer"] { XCTAssertFalse(line.contains(secret), line) }
        let object = try XCTUnwrap(JSONValue.parse(line).objectValue)
        XCTAssertEqual(object["level"]?.stringValue, "info")
        XCTAssertEqual(object["msg"]?.stringValue, "request")
        XCTAssertEqual(object["request_id"]?.stringValue, "log-test-1")
        XCTAssertEqual(object["method"]?.stringValue, "POST")
        XCTAssertEqual(object["route"]?.stringValue, "/v1/things/{id}")
        XCTAssertEqual(object["path"]?.stringValue, "/v1/things/t1")
        XCTAssertEqual(object["status"]?.intValue, 201)
        XCTAssertEqual(object["bytes_in"]?.intValue, Int64(body.count))
        XCTAssertEqual(object["bytes_out"]?.intValue, Int64(r.body.count))
        XCTAssertNotNil(object["duration_ms"]?.doubleValue)
        let ts = try XCTUnwrap(object["ts"]?.stringValue)
        XCTAssertNotNil(ts.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/), ts)
    }
}
