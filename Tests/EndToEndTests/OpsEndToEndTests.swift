import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelayTestSupport

/// Operations paths a newcomer and an operator meet (docs/operations.md): provider credentials
/// removed and changed on every node through NOTIFY, the simulated phone across a sandbox
/// restart, one `--name` rule for every `simulate-device` task, and its output reaching a file
/// line by line while it runs.
final class OpsEndToEndTests: EndToEndTestCase {

    func testDeletingAndReplacingProviderCredentialsReachesTheCacheThroughNotify() throws {
        // The cache keeps entries for 60 s; only the NOTIFY path can make it see a change sooner.
        XCTAssertEqual(h.credentials.ttlSeconds, 60)
        let connected = h.credentials.invalidationCount
        h.credentials.startChangeListener(conninfo: h.conninfo)
        XCTAssertTrue(h.credentials.waitForInvalidation(after: connected, timeoutSeconds: 10), "the listener connects (and drops the cache)")
        let t = try h.tenantWithSandboxCredentials(appId: "com.example.delivery")
        let before = try h.credentials.credentials(tenantId: t.id)
        XCTAssertNotNil(before.apns["sandbox"])
        XCTAssertNotNil(before.fcm)

        // Wrong environment value, wrong credential kind: refused, nothing deleted.
        let bad = h.call("DELETE", "/v1/provider-credentials/apns?environment=staging", as: t.master)
        XCTAssertEqual(bad.status, 400, "\(bad)")
        XCTAssertEqual(bad.errorCode, "INVALID_REQUEST")
        XCTAssertEqual(bad.json["error"]?["details"]?["field"]?.stringValue, "environment")
        let notMaster = h.call("DELETE", "/v1/provider-credentials/fcm", as: t.publishable)
        XCTAssertEqual(notMaster.status, 403, "\(notMaster)")
        let none = h.call("DELETE", "/v1/provider-credentials/apns?environment=production", as: t.master)
        XCTAssertEqual(none.status, 404, "no production key was configured: \(none)")
        XCTAssertEqual(none.errorCode, "NOT_FOUND")

        var seen = h.credentials.invalidationCount
        let started = Date()
        let del = h.call("DELETE", "/v1/provider-credentials/apns?environment=sandbox", as: t.master)
        XCTAssertEqual(del.status, 200, "\(del)")
        XCTAssertEqual(del.json["deleted"]?.arrayValue?.map { $0["id"]?.stringValue }, ["apns_sandbox"])
        XCTAssertEqual(del.json["deleted"]?.arrayValue?.first?["fingerprint"]?.stringValue, h.sandbox.apnsKey.publicKey.fingerprint)
        XCTAssertNil(del.json["deleted"]?.arrayValue?.first?["private_key"])
        XCTAssertTrue(h.credentials.waitForInvalidation(after: seen, timeoutSeconds: 10), "NOTIFY reached the credential cache")
        let after = try h.credentials.credentials(tenantId: t.id)
        print("provider credential change seen by the cache after \(String(format: "%.3f", Date().timeIntervalSince(started))) s")
        XCTAssertNil(after.apns["sandbox"], "the deleted key is gone from the cache long before its 60 s lifetime")
        XCTAssertNotNil(after.fcm, "the FCM credential stays")
        XCTAssertEqual(h.call("DELETE", "/v1/provider-credentials/apns", as: t.master).status, 404, "deleting again: nothing left")

        // A PUT is a change too.
        seen = h.credentials.invalidationCount
        let p8 = try String(contentsOf: h.sandboxDir.appendingPathComponent("apns-key.p8"), encoding: .utf8)
        let put = h.call(
            "PUT", "/v1/provider-credentials/apns",
            [
                "team_id": .string(h.sandbox.teamId), "key_id": .string(h.sandbox.keyId), "private_key": .string(p8),
                "topics": ["com.example.delivery"], "environment": "production"
            ], as: t.master)
        XCTAssertEqual(put.status, 201, "\(put)")
        XCTAssertTrue(h.credentials.waitForInvalidation(after: seen, timeoutSeconds: 10))
        XCTAssertNotNil(try h.credentials.credentials(tenantId: t.id).apns["production"])

        let fcm = h.call("DELETE", "/v1/provider-credentials/fcm", as: t.master)
        XCTAssertEqual(fcm.status, 200, "\(fcm)")
        XCTAssertEqual(fcm.json["deleted"]?.arrayValue?.first?["id"]?.stringValue, "fcm")
        XCTAssertEqual(h.call("DELETE", "/v1/provider-credentials/fcm", as: t.master).status, 404)
        let list = h.call("GET", "/v1/provider-credentials", as: t.master)
        XCTAssertEqual(list.json["data"]?.arrayValue?.compactMap { $0["id"]?.stringValue }, ["apns_production"])

        // Audited with fingerprints.
        let audit = h.call("GET", "/v1/audit-events?limit=200", as: t.master)
        let actions = (audit.json["data"]?.arrayValue ?? []).compactMap { $0["action"]?.stringValue }
        XCTAssertEqual(actions.filter { $0 == "provider_credential.apns.delete" }.count, 1, "\(actions)")
        XCTAssertEqual(actions.filter { $0 == "provider_credential.fcm.delete" }.count, 1, "\(actions)")
        let event = (audit.json["data"]?.arrayValue ?? []).first { $0["action"]?.stringValue == "provider_credential.apns.delete" }
        XCTAssertEqual(event?["details"]?["fingerprint"]?.stringValue, h.sandbox.apnsKey.publicKey.fingerprint, "\(event ?? .null)")
    }

    func testThePhoneReadsARestartedSandboxFromTheStart() throws {
        let deliveries = try JSONValue.parse(try httpGet(h.sandbox.controlURL + "/sandbox/deliveries"))
        XCTAssertEqual(deliveries["run_id"]?.stringValue, h.sandbox.runId)
        let t = try h.tenantWithSandboxCredentials(appId: "com.example.delivery")
        let phone = try h.device(.android, appId: "com.example.delivery", publishable: t.publishable)
        let token = try XCTUnwrap(phone.state.fcmToken)
        // The state file of a phone that read up to #99 of an earlier sandbox run.
        var old = phone.state
        old.cursors = [token: 99]
        old.sandboxRunId = "an-earlier-run"
        let lines = LineCapture()
        let restarted = DeviceSimulatorRunner(
            state: old, stateFile: h.workDir.appendingPathComponent("restarted.json"),
            output: { lines.append($0) })
        try restarted.pollOnce()
        XCTAssertEqual(restarted.state.sandboxRunId, h.sandbox.runId)
        XCTAssertEqual(restarted.state.cursors, [:], "cursors of the earlier run are dropped")
        XCTAssertTrue(lines.text.contains("sandbox restarted"), lines.text)
        // Same run: cursors are kept.
        var same = phone.state
        same.cursors = [token: 99]
        same.sandboxRunId = h.sandbox.runId
        let kept = DeviceSimulatorRunner(state: same, stateFile: h.workDir.appendingPathComponent("same.json"), output: { _ in })
        try kept.pollOnce()
        XCTAssertEqual(kept.state.cursors, [token: 99])
    }

    func httpGet(_ url: String) throws -> String { TestHTTP.send("GET", url).text }

    /// `liverelay args…` in the harness's work directory with only `PATH` set.
    func liverelay(_ args: [String]) throws -> ChildProcessResult {
        try ChildProcess.run(
            try SimulateDeviceCLITests.executable(), args,
            environment: ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"], directory: h.workDir)
    }

    func testEverySimulateDeviceTaskFollowsOneNameRuleAndTheTourReRuns() throws {
        let t = try h.tenantWithSandboxCredentials(appId: "com.example.delivery")
        let template = EndToEndHarness.repoRoot + "/deploy/demo/delivery-template.json"
        let common = ["--publishable-key", t.publishable, "--url", h.baseURL, "--sandbox-url", h.sandbox.controlURL]
        let missing = try liverelay(["simulate-device", "prepare", "--template", template])
        XCTAssertEqual(missing.status, 2)
        XCTAssertTrue(missing.err.contains("no device \"default\""), missing.err)

        for _ in 0..<2 {  // the README tour, twice: every step succeeds again
            let ios = try liverelay(["simulate-device", "register", "--platform", "ios", "--app-id", "com.example.delivery"] + common)
            XCTAssertEqual(ios.status, 0, ios.err)
            XCTAssertTrue(ios.out.contains(".liverelay/device-default.json"), ios.out)
            let pixel = try liverelay(
                [
                    "simulate-device", "register", "--name", "pixel", "--platform", "android",
                    "--app-id", "com.example.delivery"
                ] + common)
            XCTAssertEqual(pixel.status, 0, pixel.err)
            // Two devices exist; without --name every task still means the default one.
            let prepared = try liverelay(["simulate-device", "prepare", "--template", template])
            XCTAssertEqual(prepared.status, 0, prepared.err)
            XCTAssertEqual(try JSONValue.parse(prepared.out)["status"]?.stringValue, "ready", prepared.out)
            let named = try liverelay(["simulate-device", "prepare", "--name", "pixel", "--template", template])
            XCTAssertEqual(named.status, 0, named.err)
            let show = try liverelay(["simulate-device", "show"])
            XCTAssertTrue(show.out.contains("(ios, com.example.delivery"), show.out)
            let showPixel = try liverelay(["simulate-device", "show", "--name", "pixel"])
            XCTAssertTrue(showPixel.out.contains("(android, com.example.delivery"), showPixel.out)
        }
        let other = try liverelay(["simulate-device", "register", "--platform", "android", "--app-id", "com.example.delivery"] + common)
        XCTAssertEqual(other.status, 2, "the default device is an iOS one: \(other.err)")
        XCTAssertTrue(other.err.contains("use another --name"), other.err)
    }

    func testThePhonesOutputReachesAFileLineByLineWhileItRuns() throws {
        let t = try h.tenantWithSandboxCredentials(appId: "com.example.delivery")
        let reg = try liverelay([
            "simulate-device", "register", "--platform", "ios", "--app-id", "com.example.delivery",
            "--publishable-key", t.publishable, "--url", h.baseURL, "--sandbox-url", h.sandbox.controlURL
        ])
        XCTAssertEqual(reg.status, 0, reg.err)
        let file = h.workDir.appendingPathComponent("phone.log")
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try SimulateDeviceCLITests.executable())
        p.arguments = ["simulate-device", "run", "--interval", "0.1", "--timeout", "120"]
        p.currentDirectoryURL = h.workDir
        p.standardOutput = handle
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer { if p.isRunning { p.terminate() }; p.waitUntilExit(); try? handle.close() }
        // The first line is in the file while the process still runs (block buffering would
        // hold it until exit). Waits on the file's growth, bounded.
        let deadline = Date().addingTimeInterval(30)
        var text = ""
        while Date() < deadline {
            text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
            if text.contains("\n") { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertTrue(p.isRunning, "still polling")
        XCTAssertTrue(text.hasPrefix("device ins_"), "the first line is on disk while it runs: \(text.debugDescription)")
    }
}
