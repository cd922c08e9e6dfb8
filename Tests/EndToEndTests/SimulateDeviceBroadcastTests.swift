import Foundation
import Delivery
import JSON
import LiveRelayApp
import LiveRelayCore
import LiveRelaySandbox
import Logging
import Metrics
import Locking
import XCTest

/// A simulated iOS 18 phone subscribed to a channel reads the sandbox's broadcast log and shows
/// what each broadcast does to its lock screen; the broadcasts are sent by `APNsChannelClient`
/// over real TLS and HTTP/2 (docs/channels.md, Apple "Sending broadcast push notification
/// requests to APNs").
final class SimulateDeviceBroadcastTests: XCTestCase {
    func testPhoneAppliesBroadcastsOfItsChannel() throws {
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("lr-bcast-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try Sandbox(configuration: SandboxConfiguration(port: 0, controlPort: 0, directory: dir))
        try sandbox.start()
        defer { sandbox.stop() }
        let base = URL(string: sandbox.baseURL)!
        var endpoints = ProviderEndpoints(
            apnsProductionURL: base, apnsSandboxURL: base, fcmURL: base, extraCAFile: sandbox.files["ca.pem"],
            connectTimeoutSeconds: 5, requestTimeoutSeconds: 10)
        endpoints.setChannelURLs(base)
        let source = StaticProviderCredentialSource([
            "ten_a": TenantProviderCredentials(apns: [
                "sandbox": APNsCredential(
                    teamId: sandbox.teamId, keyId: sandbox.keyId, topics: ["com.example.match"], environment: "sandbox", privateKey: sandbox.apnsKey)
            ])
        ])
        let client = APNsChannelClient(source: source, endpoints: endpoints, metrics: MetricsRegistry())
        defer { client.close() }
        let channel = try client.createChannel(
            tenantId: "ten_a", appId: "com.example.match", environment: "sandbox",
            storagePolicy: .noMessageStored, timeoutSeconds: 10
        ).get()

        // The phone: an activity started locally with pushType .channel(<apns channel id>).
        var state = DeviceSimulatorState(platform: .ios, appId: "com.example.match", apiURL: "http://127.0.0.1:1", sandboxURL: sandbox.controlURL)
        state.osVersion = "18.2"
        var sim = DeviceSimulator(state: state)
        _ = sim.localStart(
            targetId: "tgt_m", activityType: "match", templateVersion: nil, businessKey: "match:1", state: ["score": "0-0"],
            now: Date(), updateToken: nil, channelId: channel.channelId)
        let lines = Locked<[String]>([])
        let phone = DeviceSimulatorRunner(state: sim.state, stateFile: nil, output: { l in lines.withLock { $0.append(l) } })

        let now = Int64(Date().timeIntervalSince1970)
        for (i, score) in ["1-0", "1-1"].enumerated() {
            let body = APNsPayload(
                event: .update, timestamp: Date(timeIntervalSince1970: TimeInterval(now + Int64(i))),
                contentState: ["score": .string(score)]
            ).bytes()
            let r = client.sendBroadcast(
                OutgoingBroadcast(
                    tenantId: "ten_a", channelOperationId: "cop_\(i)", environment: "sandbox",
                    appId: "com.example.match", channelId: channel.channelId, body: body,
                    priority: 10, expiration: 0))
            XCTAssertEqual(r.status, 200)
        }
        let events = try phone.pollOnce()
        XCTAssertEqual(events.map(\.kind), [.updated, .updated])
        XCTAssertEqual(phone.state.activity("tgt_m")?.state, ["score": "1-1"])
        XCTAssertTrue(phone.lockScreen.contains("score: 1-1"), phone.lockScreen)
        XCTAssertTrue(lines.withLock { $0.joined(separator: "\n") }.contains("[broadcast update #"), "the event names the broadcast")
        // Read again: nothing new (per-channel cursor).
        XCTAssertEqual(try phone.pollOnce(), [])
        // The end broadcast ends the activity; the channel is then deleted.
        let end = APNsPayload(
            event: .end, timestamp: Date(timeIntervalSince1970: TimeInterval(now + 5)), contentState: ["score": "2-1"],
            dismissalDate: Date(timeIntervalSince1970: TimeInterval(now - 1))
        ).bytes()
        XCTAssertEqual(
            client.sendBroadcast(
                OutgoingBroadcast(
                    tenantId: "ten_a", channelOperationId: "cop_end", environment: "sandbox",
                    appId: "com.example.match", channelId: channel.channelId, body: end,
                    priority: 10, expiration: 0)
            ).status, 200)
        XCTAssertEqual(try phone.pollOnce().map(\.kind), [.dismissed])
        XCTAssertEqual(phone.state.activity("tgt_m")?.state, ["score": "2-1"])
        XCTAssertNoThrow(
            try client.deleteChannel(
                tenantId: "ten_a", appId: "com.example.match", environment: "sandbox",
                channelId: channel.channelId, timeoutSeconds: 10
            ).get())
    }
}
