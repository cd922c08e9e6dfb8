import XCTest
import JSON
@testable import LiveRelayCore

/// docs/channels.md decisions as pure functions: who is served by the broadcast, what fan-out
/// sends a member, what a broadcast answer means.
final class ChannelRulesTests: XCTestCase {
    func testBroadcastDeliveryFromOSVersion() {
        XCTAssertTrue(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: "18.0"))
        XCTAssertTrue(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: "18"))
        XCTAssertTrue(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: "26.1"))
        XCTAssertFalse(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: "17.9.9"), "the boundary: 18.0")
        XCTAssertFalse(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: nil), "unknown: fan-out")
        XCTAssertFalse(ChannelRules.deliversByBroadcast(platform: "ios", osVersion: "x"))
        XCTAssertFalse(ChannelRules.deliversByBroadcast(platform: "android", osVersion: "18.0"))
    }

    func testFanoutSendsNewestAndEveryAlertInOrder() {
        let w = (1...6).map { ChannelWriteFacts(id: "cop_\($0)", seq: Int64($0), kind: .update, hasAlert: $0 == 2 || $0 == 4) }
        XCTAssertEqual(ChannelRules.fanoutSends(watermark: 0, writes: w.shuffled()).map(\.seq), [2, 4, 6])
        XCTAssertEqual(ChannelRules.fanoutSends(watermark: 4, writes: w).map(\.seq), [6], "never an older write after a newer one")
        XCTAssertEqual(ChannelRules.fanoutSends(watermark: 6, writes: w), [])
        XCTAssertEqual(ChannelRules.fanoutSends(watermark: 5, writes: w).map(\.seq), [6])
        let alertLast = w + [ChannelWriteFacts(id: "cop_7", seq: 7, kind: .update, hasAlert: true)]
        XCTAssertEqual(ChannelRules.fanoutSends(watermark: 4, writes: alertLast).map(\.seq), [7])
    }

    func testSupersededBroadcasts() {
        let q = [
            ChannelWriteFacts(id: "a", seq: 1, kind: .update, hasAlert: false), ChannelWriteFacts(id: "b", seq: 2, kind: .update, hasAlert: true)
        ]
        XCTAssertEqual(ChannelRules.supersededBroadcasts(by: .update, queued: q), ["a"], "alerts are never coalesced by an update")
        XCTAssertEqual(ChannelRules.supersededBroadcasts(by: .end, queued: q), ["a", "b"], "an end supersedes every queued update")
    }

    func testBroadcastAnswers() {
        func d(_ r: BroadcastResult, alert: Bool = false) -> BroadcastDecision { ChannelRules.decide(r, hasAlert: alert, attempts: 1, random: 0) }
        XCTAssertEqual(d(.accepted(requestId: "r", uniqueId: "u")), .accepted(requestId: "r", uniqueId: "u"))
        for reason in ["ChannelNotRegistered", "BadChannelId"] {
            guard case .channelInvalid = d(.refused(status: 400, reason: reason, retryAfterSeconds: nil)) else { return XCTFail(reason) }
        }
        guard case .failed(let f) = d(.refused(status: 400, reason: "BadPriority", retryAfterSeconds: nil)) else { return XCTFail() }
        XCTAssertEqual(f["code"]?.stringValue, "PROVIDER_REJECTED")
        guard case .failed(let c) = d(.refused(status: 403, reason: "InvalidProviderToken", retryAfterSeconds: nil)) else { return XCTFail() }
        XCTAssertEqual(c["code"]?.stringValue, "PROVIDER_CREDENTIALS_INVALID")
        for s in [429, 500, 503] {
            guard case .retry = d(.refused(status: s, reason: "x", retryAfterSeconds: nil)) else { return XCTFail("\(s)") }
        }
        guard case .retry = d(.notProcessed(message: "refused")) else { return XCTFail() }
        guard case .retry = d(.possiblyProcessed(message: "lost")) else { return XCTFail("state-only may be resent") }
        guard case .failed = d(.possiblyProcessed(message: "lost"), alert: true) else { return XCTFail("an alert is never resent") }
    }

    func testOperationStatus() {
        XCTAssertEqual(ChannelRules.operationStatus(broadcast: .queued, fanoutDone: false, fanoutStarted: false, superseded: false), "queued")
        XCTAssertEqual(ChannelRules.operationStatus(broadcast: .accepted, fanoutDone: false, fanoutStarted: true, superseded: false), "sending")
        XCTAssertEqual(ChannelRules.operationStatus(broadcast: .accepted, fanoutDone: true, fanoutStarted: true, superseded: false), "accepted")
        XCTAssertEqual(ChannelRules.operationStatus(broadcast: .failed, fanoutDone: true, fanoutStarted: true, superseded: false), "failed")
        XCTAssertEqual(ChannelRules.operationStatus(broadcast: .superseded, fanoutDone: true, fanoutStarted: false, superseded: true), "superseded")
    }

    func testPayloadPreCheckCoversAndroidMembers() throws {
        // FCM data carries channel_id and the state as a JSON string (escaped quotes): a state can
        // fit the APNs body and still be too large for an Android member.
        let quotes = String(repeating: "\"", count: 1900)
        XCTAssertNoThrow(try APNsPayload.checkSize(APNsPayload(event: .update, timestamp: Date(), contentState: ["q": .string(quotes)]).bytes()))
        XCTAssertThrowsError(
            try ChannelRequests.checkPayload(
                channelId: "ch_x", event: .update, state: ["q": .string(quotes)], alert: nil,
                staleAt: nil, relevanceScore: nil, dismissAt: nil, now: Date()))
    }
}
