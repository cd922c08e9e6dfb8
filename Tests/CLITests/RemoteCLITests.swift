import Foundation
import XCTest
import JSON

/// `liverelay remote …` run as the real binary against a live server: output shape, exit
/// codes (0 ok, 2 usage, 3 API error, 4 network error), error mapping to stderr, pagination.
final class RemoteCLITests: XCTestCase {
    var env: CLIEnvironment!

    override func setUpWithError() throws { env = try CLIEnvironment.make() }
    override func tearDown() { env?.tearDown() }

    func testUsageErrorsExitTwo() throws {
        let w = try env.world()
        for args in [
            [], ["bogus"], ["targets"], ["start", "--template-version", "tv_x"], ["target", "get"],
            ["update", "--target-id", "tgt_x", "--state", "{not json"], ["capabilities", "--nope", "1"],
            ["targets", "list", "--limit", "many"],
            [
                "start", "--start-target-id", w.startTarget, "--template-version", "tv",
                "--state", "{}", "--alert-title", "only a title"
            ]
        ] {
            let r = try env.remote(args, key: w.sender)
            XCTAssertEqual(r.status, 2, "\(args): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("liverelay remote:"), r.stderr)
            XCTAssertEqual(r.stdout, "")
        }
        let noKey = try env.run(["remote", "capabilities"], env: ["LIVERELAY_URL": env.baseURL])
        XCTAssertEqual(noKey.status, 2)
        XCTAssertTrue(noKey.stderr.contains("LIVERELAY_KEY"), noKey.stderr)
        let help = try env.run(["remote", "--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("targets list"), help.stdout)
    }

    func testNetworkErrorExitsFour() throws {
        // A port that was just free: nothing listens there.
        let port = try freePort()
        let r = try env.remote(["capabilities"], key: "lrs_x", url: "http://127.0.0.1:\(port)")
        XCTAssertEqual(r.status, 4, r.stderr)
        XCTAssertTrue(r.stderr.contains("network error"), r.stderr)
        XCTAssertEqual(r.stdout, "")
    }

    func testCapabilitiesAndAPIErrorMapping() throws {
        let w = try env.world()
        let ok = try env.remote(["capabilities"], key: w.sender)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertNotNil(ok.json["protocol_version"]?.stringValue, ok.stdout)
        XCTAssertEqual(ok.json["limits"]?["apns_payload_bytes"]?.intValue, 4096)
        XCTAssertTrue(ok.stdout.hasSuffix("\n"))

        let bad = try env.remote(["capabilities"], key: "lrs_notakey")
        XCTAssertEqual(bad.status, 3)
        XCTAssertEqual(bad.stdout, "")
        XCTAssertTrue(bad.stderr.hasPrefix("UNAUTHENTICATED (HTTP 401): "), bad.stderr)
        XCTAssertTrue(bad.stderr.contains("request_id: "), bad.stderr)

        let snapAsMaster = try env.remote(["snapshot", "--target-id", "tgt_00000000000000000000000000"], key: w.master)
        XCTAssertEqual(snapAsMaster.status, 3)
        XCTAssertTrue(snapAsMaster.stderr.hasPrefix("PERMISSION_DENIED (HTTP 403)"), snapAsMaster.stderr)

        let missing = try env.remote(["target", "get", "tgt_00000000000000000000000000"], key: w.sender)
        XCTAssertEqual(missing.status, 3)
        XCTAssertTrue(missing.stderr.hasPrefix("NOT_FOUND (HTTP 404)"), missing.stderr)
    }

    func testSeedFlowStartUpdateEnd() throws {
        let w = try env.world()
        let startArguments = [
            "start", "--start-target-id", w.startTarget, "--template-version", w.templateVersion,
            "--state", #"{"eta":"12:40"}"#, "--alert-title", "Preparing", "--alert-body", "Your order is being prepared",
            "--business-key", "delivery:42", "--business-generation", "1", "--relevance-score", "0.5",
            "--priority", "5", "--idempotency-key", "cli-start-1"
        ]
        let start = try env.remote(startArguments, key: w.sender)
        XCTAssertEqual(start.status, 0, start.stderr)
        XCTAssertFalse(start.stderr.contains("idempotency_key:"), "an explicit key is not printed")
        let tgt = try XCTUnwrap(start.json["target"]?["id"]?.stringValue, start.stdout)
        let op = try XCTUnwrap(start.json["operation"]?["id"]?.stringValue)
        XCTAssertEqual(start.json["operation"]?["kind"]?.stringValue, "start")
        XCTAssertEqual(start.json["operation"]?["priority"]?.intValue, 5)
        XCTAssertEqual(start.json["target"]?["business_key"]?.stringValue, "delivery:42")

        // The same command again replays (exit 0, same operation).
        let replay = try env.remote(startArguments, key: w.sender)
        XCTAssertEqual(replay.status, 0, replay.stderr)
        XCTAssertEqual(replay.json["operation"]?["id"]?.stringValue, op)

        // Without a key: a generated one is printed; the business instance is taken → 409 with details.
        let taken = try env.remote(
            [
                "start", "--start-target-id", w.startTarget, "--template-version", w.templateVersion,
                "--state", #"{"eta":"1"}"#, "--alert-title", "t", "--alert-body", "b",
                "--business-key", "delivery:42", "--business-generation", "1"
            ], key: w.sender)
        XCTAssertEqual(taken.status, 3)
        XCTAssertTrue(taken.stderr.contains("idempotency_key: "), taken.stderr)
        XCTAssertTrue(taken.stderr.contains("BUSINESS_GENERATION_CONFLICT (HTTP 409)"), taken.stderr)
        XCTAssertTrue(taken.stderr.contains(#""target_id":"\#(tgt)""#), taken.stderr)

        let stateFile = FileManager.default.temporaryDirectory.appendingPathComponent("state-\(UUID().uuidString).json")
        try Data(#"{"eta":"12:55"}"#.utf8).write(to: stateFile)
        defer { try? FileManager.default.removeItem(at: stateFile) }
        let update = try env.remote(
            [
                "update", "--target-id", tgt, "--state-file", stateFile.path, "--expected-revision", "1",
                "--alert-title", "Updated from server", "--alert-body", "New ETA 12:55", "--source-version", "7"
            ], key: w.sender)
        XCTAssertEqual(update.status, 0, update.stderr)
        XCTAssertEqual(update.json["target"]?["revision"]?.intValue, 2)
        XCTAssertEqual(update.json["operation"]?["has_alert"]?.boolValue, true)

        let stale = try env.remote(["update", "--target-id", tgt, "--state", #"{"eta":"x"}"#, "--expected-revision", "1"], key: w.sender)
        XCTAssertEqual(stale.status, 3)
        XCTAssertTrue(stale.stderr.contains("REVISION_CONFLICT (HTTP 409)"), stale.stderr)
        XCTAssertTrue(stale.stderr.contains(#""current_revision":2"#), stale.stderr)

        let schema = try env.remote(
            ["update", "--target-id", tgt, "--state-file", "-", "--expected-revision", "2"], key: w.sender,
            stdin: #"{"eta": 5}"#)
        XCTAssertEqual(schema.status, 3)
        XCTAssertTrue(schema.stderr.contains("STATE_SCHEMA_MISMATCH (HTTP 422)"), schema.stderr)

        let snap = try env.remote(["snapshot", tgt], key: w.sender)
        XCTAssertEqual(snap.status, 0, snap.stderr)
        XCTAssertEqual(snap.json["state"], ["eta": "12:55"])
        XCTAssertEqual(snap.json["source_version"]?.intValue, 7)

        let get = try env.remote(["target", "get", "--target-id", tgt], key: w.master)
        XCTAssertEqual(get.status, 0, get.stderr)
        XCTAssertEqual(get.json["id"]?.stringValue, tgt)
        XCTAssertEqual(get.json["revision"]?.intValue, 2)

        let wait = try env.remote(["target", "get", "--target-id", tgt, "--wait-until-ready-ms", "50"], key: w.sender)
        XCTAssertEqual(wait.status, 3)
        XCTAssertTrue(wait.stderr.hasPrefix("TOKEN_PENDING (HTTP 409)"), wait.stderr)

        let opGet = try env.remote(["operation", "get", "--operation-id", op], key: w.sender)
        XCTAssertEqual(opGet.status, 0, opGet.stderr)
        XCTAssertEqual(opGet.json["id"]?.stringValue, op)
        XCTAssertEqual(opGet.json["target_id"]?.stringValue, tgt)

        let ops = try env.remote(["target", "operations", tgt, "--all"], key: w.sender)
        XCTAssertEqual(ops.status, 0, ops.stderr)
        XCTAssertEqual(ops.json["data"]?.arrayValue?.count, 2)

        let end = try env.remote(
            [
                "end", "--target-id", tgt, "--state", #"{"eta":"delivered"}"#, "--expected-revision", "2",
                "--dismiss-at", Self.inOneHour(), "--wait-ms", "10"
            ], key: w.sender)
        XCTAssertEqual(end.status, 0, end.stderr)
        XCTAssertEqual(end.json["operation"]?["kind"]?.stringValue, "end")
        XCTAssertEqual(end.json["target"]?["status"]?.stringValue, "ending")

        let cleanup = try env.remote(["end", "--target-id", tgt], key: w.master)
        XCTAssertEqual(cleanup.status, 0, cleanup.stderr)

        let usage = try env.remote(["usage"], key: w.sender)
        XCTAssertEqual(usage.status, 0, usage.stderr)
        XCTAssertEqual(usage.json["limit"]?.intValue, 1000)
    }

    func testTargetsListPaginationWithAll() throws {
        let w = try env.world()
        var ids: [String] = []
        for g in 1...5 {
            let r = try env.remote(
                [
                    "start", "--start-target-id", w.startTarget, "--template-version", w.templateVersion,
                    "--state", #"{"eta":"1"}"#, "--alert-title", "Preparing", "--alert-body", "b",
                    "--business-key", "order:7", "--business-generation", String(g)
                ], key: w.sender)
            XCTAssertEqual(r.status, 0, r.stderr)
            ids.append(r.json["target"]?["id"]?.stringValue ?? "")
        }
        let page = try env.remote(["targets", "list", "--limit", "2", "--business-key", "order:7"], key: w.sender)
        XCTAssertEqual(page.status, 0, page.stderr)
        XCTAssertEqual(page.json["data"]?.arrayValue?.count, 2)
        let cursor = try XCTUnwrap(page.json["next_cursor"]?.stringValue)
        let page2 = try env.remote(["targets", "list", "--limit", "2", "--business-key", "order:7", "--cursor", cursor], key: w.sender)
        XCTAssertEqual(page2.json["data"]?.arrayValue?.count, 2)

        let all = try env.remote(["targets", "list", "--limit", "2", "--all", "--business-key", "order:7"], key: w.master)
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(Set(all.json["data"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []), Set(ids))
        XCTAssertEqual(all.json["next_cursor"], .null)
        XCTAssertNil(all.json["data"]?.arrayValue?.first?["state"], "lists carry no business state")

        let filtered = try env.remote(["targets", "list", "--status", "starting", "--start-target-id", w.startTarget, "--all"], key: w.sender)
        XCTAssertEqual(filtered.json["data"]?.arrayValue?.count, 5)
        let badStatus = try env.remote(["targets", "list", "--status", "nonsense"], key: w.sender)
        XCTAssertEqual(badStatus.status, 3)
        XCTAssertTrue(badStatus.stderr.contains(#""field":"status""#), badStatus.stderr)
    }

    static func inOneHour() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: Date().addingTimeInterval(3600))
    }

    func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }
}

/// `liverelay remote events list|get` (docs/webhooks.md "Events").
final class RemoteEventsCLITests: XCTestCase {
    var env: CLIEnvironment!

    override func setUpWithError() throws { env = try CLIEnvironment.make() }
    override func tearDown() { env?.tearDown() }

    func testEventsListFiltersAndGet() throws {
        let w = try env.world()  // its start target became ready: one start_target.ready event
        let all = try env.remote(["events", "list"], key: w.master)
        XCTAssertEqual(all.status, 0, all.stderr)
        let data = all.json["data"]?.arrayValue ?? []
        XCTAssertEqual(data.compactMap { $0["type"]?.stringValue }, ["start_target.ready"])
        XCTAssertEqual(data.first?["data"]?["object"]?["id"]?.stringValue, w.startTarget)
        let none = try env.remote(["events", "list", "--type", "target.ended", "--all"], key: w.master)
        XCTAssertEqual(none.json["data"]?.arrayValue?.count, 0, none.stdout)
        let id = data.first?["id"]?.stringValue ?? ""
        let one = try env.remote(["events", "get", id], key: w.master)
        XCTAssertEqual(one.status, 0, one.stderr)
        XCTAssertEqual(one.json["id"]?.stringValue, id)
        let bad = try env.remote(["events", "list", "--type", "nope"], key: w.master)
        XCTAssertEqual(bad.status, 3)
        XCTAssertTrue(bad.stderr.hasPrefix("INVALID_REQUEST (HTTP 400)"), bad.stderr)
        let sender = try env.remote(["events", "list"], key: w.sender)
        XCTAssertEqual(sender.status, 3, "a sender key cannot read events")
    }
}
