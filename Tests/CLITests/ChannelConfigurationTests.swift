import Foundation
import XCTest
import LiveRelayApp

/// The channel and broadcast host variables (docs/configuration.md, docs/channels.md): Apple's
/// defaults, overrides, validation naming the variable, and the endpoints handed to the sender.
final class ChannelConfigurationTests: XCTestCase {
    let names = [
        "LIVERELAY_APNS_CHANNELS_SANDBOX_URL", "LIVERELAY_APNS_CHANNELS_PRODUCTION_URL",
        "LIVERELAY_APNS_BROADCAST_SANDBOX_URL", "LIVERELAY_APNS_BROADCAST_PRODUCTION_URL"
    ]

    func testDefaultsAreApplesHosts() throws {
        let c = try Configuration.load([:])
        XCTAssertEqual(c.apnsChannelsSandboxURL, "https://api-manage-broadcast.sandbox.push.apple.com:2195")
        XCTAssertEqual(c.apnsChannelsProductionURL, "https://api-manage-broadcast.push.apple.com:2196")
        XCTAssertEqual(c.apnsBroadcastSandboxURL, "https://api-broadcast.sandbox.push.apple.com")
        XCTAssertEqual(c.apnsBroadcastProductionURL, "https://api-broadcast.push.apple.com")
        let e = c.providerEndpoints()
        XCTAssertEqual(e.apnsChannelsSandboxURL.port, 2195)
        XCTAssertEqual(e.apnsChannelsProductionURL.port, 2196)
        XCTAssertEqual(e.apnsBroadcastProductionURL.host, "api-broadcast.push.apple.com")
    }

    func testOverridesReachTheEndpoints() throws {
        var env: [String: String] = [:]
        for (i, n) in names.enumerated() { env[n] = "https://127.0.0.1:\(8000 + i)/" }
        let c = try Configuration.load(env)
        XCTAssertEqual(c.apnsChannelsSandboxURL, "https://127.0.0.1:8000", "a trailing slash is dropped")
        let e = c.providerEndpoints(maxConnectionsPerPool: 2)
        XCTAssertEqual(
            [e.apnsChannelsSandboxURL, e.apnsChannelsProductionURL, e.apnsBroadcastSandboxURL, e.apnsBroadcastProductionURL].map(\.port),
            [8000, 8001, 8002, 8003])
        XCTAssertEqual(e.maxConnectionsPerPool, 2)
    }

    func testInvalidURLsAreNamed() {
        for n in names {
            for bad in ["api.push.apple.com", "ftp://x", "https://"] {
                XCTAssertThrowsError(try Configuration.load([n: bad])) { error in
                    let text = "\(error)"
                    XCTAssertTrue(text.contains(n), text)
                }
            }
        }
    }
}
