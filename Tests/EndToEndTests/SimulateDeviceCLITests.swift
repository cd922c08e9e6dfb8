import Foundation
import XCTest
import LiveRelayTestSupport
import JSON

/// `liverelay simulate-device` as a user runs it from the README: the built executable in
/// subprocesses, its state in a file between invocations, `run` in the background until
/// SIGTERM, against the harness's API and sandbox.
final class SimulateDeviceCLITests: EndToEndTestCase {

    /// The `liverelay` executable next to the test bundle (both are built by `swift build --build-tests`).
    static func executable() throws -> String { try ChildProcess.liverelayExecutable() }

    typealias Run = ChildProcessResult

    /// `liverelay args…` in the harness's work directory, with this process's environment.
    func liverelay(_ args: [String]) throws -> Run {
        try ChildProcess.run(try Self.executable(), args, directory: h.workDir)
    }

    func testReadmeFlowThroughTheCommandLine() throws {
        let tenant = try h.tenantWithSandboxCredentials(appId: "com.example.delivery")
        let stateFile = h.workDir.appendingPathComponent("phone.json").path

        let help = try liverelay(["simulate-device", "--help"])
        XCTAssertEqual(help.status, 0)
        for flag in [
            "--platform", "--app-id", "--publishable-key", "--url", "--sandbox-url", "--environment", "--template", "--once",
            "--timeout", "--interval", "--activity-type", "--business-key", "--business-generation", "--state", "--state-file"
        ] {
            XCTAssertTrue(help.out.contains(flag), "--help documents \(flag)")
        }
        let usage = try liverelay(["simulate-device", "prepare", "--state-file", stateFile])
        XCTAssertEqual(usage.status, 2, "a usage error: \(usage.err)")
        XCTAssertTrue(usage.err.contains("--template"), usage.err)

        let reg = try liverelay([
            "simulate-device", "register", "--platform", "ios", "--app-id", "com.example.delivery",
            "--publishable-key", tenant.publishable, "--url", h.baseURL, "--sandbox-url", h.sandbox.controlURL,
            "--state-file", stateFile
        ])
        XCTAssertEqual(reg.status, 0, reg.err)
        let inst = try JSONValue.parse(reg.out)
        XCTAssertTrue(inst["installation_id"]?.stringValue?.hasPrefix("ins_") ?? false, reg.out)

        let prep = try liverelay([
            "simulate-device", "prepare", "--template", EndToEndHarness.repoRoot + "/deploy/demo/delivery-template.json",
            "--state-file", stateFile
        ])
        XCTAssertEqual(prep.status, 0, prep.err)
        let prepared = try JSONValue.parse(prep.out)
        XCTAssertEqual(prepared["status"]?.stringValue, "ready", prep.out)
        let st = try XCTUnwrap(prepared["start_target_id"]?.stringValue)
        let tv = try XCTUnwrap(prepared["template_version"]?.stringValue)

        // `run` in the background, printing to a file.
        let logURL = h.workDir.appendingPathComponent("run.log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let run = Process()
        run.executableURL = URL(fileURLWithPath: try Self.executable())
        run.arguments = ["simulate-device", "run", "--interval", "0.1", "--timeout", "120", "--state-file", stateFile]
        run.currentDirectoryURL = h.workDir
        run.standardOutput = try FileHandle(forWritingTo: logURL)
        run.standardError = run.standardOutput
        try run.run()
        defer { if run.isRunning { run.terminate() } }
        func runLog() -> String { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }

        let sender = try h.senderKey(startTarget: st, idempotencyKey: "cli-key", as: tenant.master)
        let started = h.startPreparing(startTarget: st, templateVersion: tv, idempotencyKey: "cli-start", as: sender)
        XCTAssertEqual(started.status, 202, "\(started)")
        let tgt = try XCTUnwrap(started["target"]?["id"]?.stringValue)
        let ready = h.call("GET", "/v1/remote-updates/live-activities/targets/\(tgt)?wait_until_ready_ms=30000", as: sender)
        XCTAssertEqual(ready["status"]?.stringValue, "ready", "\(ready)\n\(runLog())")
        let upd = h.call(
            "POST", "/v1/remote-updates/live-activities/update?wait_ms=10000",
            [
                "target_id": .string(tgt), "state": ["message": "Updated from server"], "expected_revision": 1, "idempotency_key": "cli-update"
            ],
            as: sender)
        XCTAssertEqual(upd["operation"]?["status"]?.stringValue, "accepted", "\(upd)")
        eventually("the running device prints the update") { runLog().contains("| message: Updated from server") }

        run.terminate()  // SIGTERM: the loop stops and the process exits cleanly
        run.waitUntilExit()
        XCTAssertEqual(run.terminationStatus, 0, runLog())
        XCTAssertTrue(runLog().contains("| ! Preparing: Your order is being prepared"), runLog())
        XCTAssertTrue(runLog().contains("update token registered for \(tgt): target ready"), runLog())

        // The state file carries on: `show` (no network) and a local start.
        let show = try liverelay(["simulate-device", "show", "--state-file", stateFile])
        XCTAssertEqual(show.status, 0, show.err)
        XCTAssertTrue(show.out.contains("message: Updated from server"), show.out)
        XCTAssertTrue(show.out.contains(st), show.out)
        let local = try liverelay([
            "simulate-device", "local-start", "--business-key", "delivery:42", "--business-generation", "1",
            "--state", #"{"message":"Preparing"}"#, "--state-file", stateFile
        ])
        XCTAssertEqual(local.status, 0, local.err)
        XCTAssertTrue(local.out.contains("(local)"), local.out)
        let localJSON = try JSONValue.parse(String(local.out[local.out.range(of: "\n{")!.lowerBound...]))
        XCTAssertEqual(localJSON["status"]?.stringValue, "ready", local.out)
        // The same reservation again (same idempotency key) replays; another generation would be a new lifecycle.
        let again = try liverelay([
            "simulate-device", "local-start", "--business-key", "delivery:42", "--business-generation", "1",
            "--state", #"{"message":"Preparing"}"#, "--state-file", stateFile
        ])
        XCTAssertEqual(again.status, 0, again.err)
        XCTAssertTrue(again.out.contains(localJSON["target_id"]?.stringValue ?? "?"), again.out)
        // A bad state is refused by the server before anything starts (the pinned schema).
        let bad = try liverelay([
            "simulate-device", "local-start", "--business-key", "delivery:43", "--business-generation", "1",
            "--state", #"{"msg":1}"#, "--state-file", stateFile
        ])
        XCTAssertEqual(bad.status, 1, bad.out)
        XCTAssertTrue(bad.err.contains("STATE_SCHEMA_MISMATCH"), bad.err)
    }
}
