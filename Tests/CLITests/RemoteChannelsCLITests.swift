import Foundation
import HTTPServer
import JSON
import Locking
import XCTest

/// `liverelay remote channels …` (docs/channels.md) run as the real binary: usage errors, and the
/// exact method, path and body of each command, read by a loopback HTTP server that records
/// what the CLI sent and answers the documented shapes.
final class RemoteChannelsCLITests: XCTestCase {
    var env: CLIEnvironment!
    var recorder: HTTPServer!
    let seen = Recorded()

    override func setUpWithError() throws {
        env = try CLIEnvironment.make()
        let r = Router()
        let channel: JSONValue = ["id": "ch_1", "object": "channel", "status": "active", "revision": 1]
        let record: @Sendable (HTTPRequest) -> Void = { [seen] req in seen.record(req) }
        r.add("POST", "/v1/remote-updates/channels") { req in
            record(req); return .json(201, channel)
        }
        r.add("GET", "/v1/remote-updates/channels") { req in
            record(req)
            let next: JSONValue = req.query["cursor"] == nil ? "c2" : .null
            return .json(200, .object(["data": [channel], "next_cursor": next]))
        }
        r.add("GET", "/v1/remote-updates/channels/{ch}") { req in
            record(req); return .json(200, channel)
        }
        r.add("POST", "/v1/remote-updates/channels/{ch}/update") { req in
            record(req); return .json(202, ["channel_operation": ["id": "cop_1", "kind": "update"], "channel": channel])
        }
        r.add("POST", "/v1/remote-updates/channels/{ch}/end") { req in
            record(req); return .json(202, ["channel_operation": ["id": "cop_2", "kind": "end"], "channel": channel])
        }
        recorder = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), router: r, log: { _ in })
        try recorder.start()
    }

    override func tearDown() {
        recorder?.shutdown(drainTimeoutSeconds: 2)
        env?.tearDown()
    }

    var url: String { "http://127.0.0.1:\(recorder.port)" }

    func testUsageErrorsExitTwo() throws {
        for args in [
            ["channels"], ["channels", "bogus"], ["channels", "get"],
            ["channels", "create", "--app-id", "com.example.app", "--environment", "sandbox", "--activity-type", "match"],
            ["channels", "update", "ch_1", "--expected-revision", "1"],
            ["channels", "update", "ch_1", "--state", "{}", "--expected-revision", "one"],
            ["channels", "update", "ch_1", "--state", "{}", "--expected-revision", "1", "--alert-title", "only a title"],
            ["channels", "update", "ch_1", "--state", "{}", "--expected-revision", "1", "--wait-ms", "10"],
            ["channels", "end", "ch_1", "--expires-at", "2026-10-18T13:00:00.000Z"],
            [
                "channels", "create", "--app-id", "a", "--environment", "sandbox", "--activity-type", "t", "--attributes-type", "X",
                "--schema", "{nope"
            ]
        ] {
            let r = try env.remote(args, key: "lrm_x", url: url)
            XCTAssertEqual(r.status, 2, "\(args): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("liverelay remote:"), r.stderr)
        }
        XCTAssertTrue(seen.calls.withLock { $0.isEmpty }, "usage errors send nothing")
        let help = try env.run(["remote", "--help"])
        XCTAssertTrue(help.stdout.contains("channels create"), help.stdout)
    }

    func testEachCommandCallsItsPathWithTheDocumentedBody() throws {
        let create = try env.remote(
            [
                "channels", "create", "--app-id", "com.example.app", "--environment", "sandbox", "--activity-type", "match",
                "--attributes-type", "MatchAttributes", "--storage-policy", "most_recent", "--label", "Final",
                "--schema", #"{"type":"object"}"#, "--idempotency-key", "ch-create-1"
            ], key: "lrm_master", url: url)
        XCTAssertEqual(create.status, 0, create.stderr)
        XCTAssertEqual(create.json["id"]?.stringValue, "ch_1")
        let list = try env.remote(["channels", "list", "--all", "--limit", "5"], key: "lrm_master", url: url)
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.json["data"]?.arrayValue?.count, 2, "--all follows next_cursor")
        XCTAssertEqual(try env.remote(["channels", "get", "ch_1"], key: "lrm_master", url: url).status, 0)
        XCTAssertEqual(try env.remote(["channels", "get", "--channel-id", "ch_1"], key: "lrm_master", url: url).status, 0)
        let update = try env.remote(
            [
                "channels", "update", "ch_1", "--state", #"{"score":"1-0"}"#, "--expected-revision", "1",
                "--alert-title", "Goal", "--alert-body", "1-0", "--priority", "1", "--stale-at", "2026-10-18T13:00:00.000Z",
                "--relevance-score", "0.5", "--expires-at", "2026-10-18T14:00:00.000Z", "--idempotency-key", "u1"
            ],
            key: "lrs_sender", url: url)
        XCTAssertEqual(update.status, 0, update.stderr)
        XCTAssertEqual(update.json["channel_operation"]?["id"]?.stringValue, "cop_1")
        let end = try env.remote(
            [
                "channels", "end", "--channel-id", "ch_1", "--state", #"{"score":"2-1"}"#, "--expected-revision", "2",
                "--dismiss-at", "2026-10-18T15:00:00.000Z"
            ], key: "lrs_sender", url: url)
        XCTAssertEqual(end.status, 0, end.stderr)
        XCTAssertTrue(end.stderr.contains("idempotency_key: "), "a generated key is printed")

        let calls = seen.calls.withLock { $0 }
        XCTAssertEqual(
            calls.map { "\($0.method) \($0.path)" },
            [
                "POST /v1/remote-updates/channels",
                "GET /v1/remote-updates/channels", "GET /v1/remote-updates/channels",
                "GET /v1/remote-updates/channels/ch_1", "GET /v1/remote-updates/channels/ch_1",
                "POST /v1/remote-updates/channels/ch_1/update",
                "POST /v1/remote-updates/channels/ch_1/end"
            ])
        XCTAssertEqual(
            calls[0].body,
            [
                "app_id": "com.example.app", "environment": "sandbox", "activity_type": "match",
                "attributes_type": "MatchAttributes", "storage_policy": "most_recent", "label": "Final",
                "schema": ["type": "object"], "idempotency_key": "ch-create-1"
            ])
        XCTAssertEqual(calls[0].key, "Bearer lrm_master")
        XCTAssertEqual(calls[1].query["limit"], "5")
        XCTAssertEqual(calls[2].query["cursor"], "c2")
        XCTAssertEqual(
            calls[5].body,
            [
                "state": ["score": "1-0"], "expected_revision": 1, "alert": ["title": "Goal", "body": "1-0"],
                "priority": 1, "stale_at": "2026-10-18T13:00:00.000Z", "relevance_score": 0.5,
                "expires_at": "2026-10-18T14:00:00.000Z", "idempotency_key": "u1"
            ])
        let endBody = try XCTUnwrap(calls[6].body.objectValue)
        XCTAssertEqual(Set(endBody.keys), ["state", "expected_revision", "dismiss_at", "idempotency_key"])
        XCTAssertEqual(endBody["dismiss_at"], "2026-10-18T15:00:00.000Z")
    }
}

/// What the loopback server received, in order.
final class Recorded: Sendable {
    struct Call: Sendable { let method: String; let path: String; let query: [String: String]; let body: JSONValue; let key: String? }
    let calls = Locked<[Call]>([])

    func record(_ req: HTTPRequest) {
        let call = Call(method: req.method, path: req.path, query: req.query, body: (try? req.jsonBody()) ?? .null, key: req.header("authorization"))
        calls.withLock { $0.append(call) }
    }
}
