import Foundation
import Crypto
import Delivery
import HTTP2
import JSON
@testable import LiveRelayCore
import LiveRelaySandbox
import Locking
import XCTest

/// `APNsChannelClient` (channel management and broadcasts) against the sandbox over real TLS
/// and HTTP/2 (docs/channels.md "APNs wire").
final class APNsChannelClientTests: ProviderTestCase {

    var client: APNsChannelClient { h.sender.channels }
    let app = "com.example.app"

    func create(_ policy: APNsMessageStoragePolicy = .noMessageStored, app: String = "com.example.app") throws -> APNsChannelCreated {
        try client.createChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", storagePolicy: policy,
            timeoutSeconds: 10
        ).get()
    }

    func broadcast(
        _ channelId: String, expiration: Int64 = 0, priority: Int = 10, body: [UInt8]? = nil,
        event: PushEvent = .update
    ) -> OutgoingBroadcast {
        let payload = body ?? APNsPayload(event: event, timestamp: h.clock.now(), contentState: ["score": "2-1"]).bytes()
        return OutgoingBroadcast(
            tenantId: ProviderHarness.tenant, channelOperationId: "cop_test", environment: "sandbox", appId: app,
            channelId: channelId, body: payload, priority: priority, expiration: expiration)
    }

    func refusal<T>(_ r: Result<T, APNsChannelError>) -> APNsProviderRefusal? {
        if case .failure(.provider(let p)) = r { return p }
        return nil
    }

    func testCreateReadListDelete() throws {
        let requestId = APNsChannelClient.newRequestId()
        let none = try client.createChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", storagePolicy: .noMessageStored,
            timeoutSeconds: 10, requestId: requestId
        ).get()
        XCTAssertEqual(none.apnsRequestId, requestId, "APNs echoes apns-request-id")
        XCTAssertNotNil(Data(base64Encoded: none.channelId), "channel ids are base64")
        let stored = try create(.mostRecentMessageStored)
        XCTAssertEqual(Set(h.sandbox.channels(bundleId: app).map(\.id)), [none.channelId, stored.channelId])

        let info = try client.readChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", channelId: stored.channelId,
            timeoutSeconds: 10
        ).get()
        XCTAssertEqual(info.storagePolicy, .mostRecentMessageStored)
        XCTAssertEqual(info.pushType, "LiveActivity")
        XCTAssertEqual(
            try client.readChannel(
                tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", channelId: none.channelId,
                timeoutSeconds: 10
            ).get().storagePolicy, .noMessageStored)

        let list = try client.listChannels(tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", timeoutSeconds: 10).get()
        XCTAssertEqual(list.channelIds, [none.channelId, stored.channelId])
        XCTAssertEqual(
            try client.listChannels(
                tenantId: ProviderHarness.tenant, appId: "com.example.b", environment: "sandbox",
                timeoutSeconds: 10
            ).get().channelIds, [], "channels belong to one bundle id")

        XCTAssertEqual(
            try client.deleteChannel(
                tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", channelId: none.channelId,
                timeoutSeconds: 10
            ).get().channelId, none.channelId)
        XCTAssertEqual(
            try client.listChannels(tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", timeoutSeconds: 10).get().channelIds,
            [stored.channelId])
        // Deleted: reading, deleting again and broadcasting answer ChannelNotRegistered.
        let reread = client.readChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", channelId: none.channelId, timeoutSeconds: 10)
        XCTAssertEqual(refusal(reread)?.status, 400)
        XCTAssertEqual(refusal(reread)?.reason, "ChannelNotRegistered")
        let again = client.deleteChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", channelId: none.channelId, timeoutSeconds: 10)
        XCTAssertEqual(refusal(again)?.reason, "ChannelNotRegistered")
        XCTAssertEqual(again.failureValue?.providerStatus, 400)
        XCTAssertEqual(again.failureValue?.providerReason, "ChannelNotRegistered")
        let gone = client.sendBroadcast(broadcast(none.channelId))
        XCTAssertEqual(gone.result, .outcome(.tokenDead(providerStatus: 400, providerReason: "ChannelNotRegistered")))
        XCTAssertTrue(gone.isChannelInvalid)
        XCTAssertEqual(gone.status, 400)
        XCTAssertEqual(gone.reason, "ChannelNotRegistered")
    }

    func testBroadcastAcceptedWithUniqueIdAndHeaders() throws {
        let ch = try create()
        let b = broadcast(ch.channelId, priority: 5)
        let r = client.sendBroadcast(b)
        XCTAssertEqual(r.status, 200)
        let unique = try XCTUnwrap(r.apnsUniqueId)
        XCTAssertNotNil(UUID(uuidString: unique))
        XCTAssertEqual(r.result, .outcome(.accepted(providerId: unique)))
        XCTAssertEqual(r.apnsRequestId, b.apnsRequestId)
        XCTAssertFalse(r.isChannelInvalid)
        let d = try XCTUnwrap(h.sandbox.broadcasts(channelId: ch.channelId).first)
        XCTAssertEqual(d.status, 200)
        XCTAssertEqual(d.headers["apns-channel-id"], ch.channelId)
        XCTAssertEqual(d.headers["apns-push-type"], "liveactivity")
        XCTAssertEqual(d.headers["apns-priority"], "5")
        XCTAssertEqual(d.headers["apns-expiration"], "0")
        XCTAssertEqual(d.headers["apns-request-id"], b.apnsRequestId)
        XCTAssertNil(d.headers["apns-topic"], "broadcasts carry no apns-topic")
        XCTAssertEqual(d.payload["aps"]?["event"]?.stringValue, "update")
        XCTAssertEqual(d.jwtKeyId, h.sandbox.keyId)
        // Priority 1 is a broadcast priority; a stored channel takes a real expiration.
        let stored = try create(.mostRecentMessageStored)
        let expiration = OutgoingBroadcast.expirationHeader(
            storagePolicy: .mostRecentMessageStored, expiresAt: nil, now: h.clock.now(),
            defaultSeconds: 3600)
        XCTAssertEqual(expiration, Int64(h.clock.now().timeIntervalSince1970.rounded(.down)) + 3600)
        XCTAssertEqual(client.sendBroadcast(broadcast(stored.channelId, expiration: expiration, priority: 1)).status, 200)
        XCTAssertEqual(client.sendBroadcast(broadcast(stored.channelId, expiration: expiration, event: .end)).status, 200)
        XCTAssertEqual(
            OutgoingBroadcast.expirationHeader(
                storagePolicy: .noMessageStored, expiresAt: h.clock.now().addingTimeInterval(60),
                now: h.clock.now(), defaultSeconds: 3600), 0)
        XCTAssertEqual(h.sandbox.broadcasts().count, 3)
        XCTAssertEqual(h.sandbox.stats.broadcastRequests, 3)
        let counter = h.metrics.counter("liverelay_provider_responses_total", help: "", labels: ["provider", "status", "reason"])
        XCTAssertEqual(counter.value(["apns_broadcast", "200", ""]), 3)
        XCTAssertEqual(counter.value(["apns_channels", "201", ""]), 2)
    }

    /// Every refusal the client can get, each at its boundary, and how it is classified.
    func testBroadcastRefusalsAndClassification() throws {
        let none = try create()
        // Storage policy none takes expiration 0 only.
        let expiring = client.sendBroadcast(broadcast(none.channelId, expiration: 1))
        XCTAssertEqual(expiring.result, .outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "BadExpirationDate")))
        // Priorities 1, 5, 10 only.
        XCTAssertEqual(client.sendBroadcast(broadcast(none.channelId, priority: 1)).status, 200)
        XCTAssertEqual(client.sendBroadcast(broadcast(none.channelId, priority: 2)).reason, "BadPriority")
        // Payload limit: 4096 bytes pass, 4097 → 413.
        let fits = paddedBody(4096)
        XCTAssertEqual(fits.count, 4096)
        XCTAssertEqual(client.sendBroadcast(broadcast(none.channelId, body: fits)).status, 200)
        let over = client.sendBroadcast(broadcast(none.channelId, body: paddedBody(4097)))
        XCTAssertEqual(over.result, .outcome(.failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: "PayloadTooLarge")))
        // A broadcast cannot start activities.
        XCTAssertEqual(
            client.sendBroadcast(
                broadcast(
                    none.channelId,
                    body: APNsPayload(
                        event: .start, timestamp: h.clock.now(), contentState: [:], alert: PushAlert(title: "t", body: "b"),
                        start: .init(attributesType: "A", targetId: "tgt_x", templateVersion: "tv_x")
                    ).bytes())
            ).reason, "BadPayload")
        // Channel ids: malformed → BadChannelId (channel invalid), unknown → ChannelNotRegistered.
        let bad = client.sendBroadcast(broadcast("not base64!"))
        XCTAssertEqual(bad.result, .outcome(.tokenDead(providerStatus: 400, providerReason: "BadChannelId")))
        XCTAssertTrue(bad.isChannelInvalid)
        XCTAssertTrue(client.sendBroadcast(broadcast(Data(repeating: 7, count: 16).base64EncodedString())).isChannelInvalid)
        // Injected answers: 429 and 5xx retry (Retry-After honoured), 403 credential errors fail.
        let cases: [(SandboxFault, PushResult)] = [
            (SandboxFault(provider: "broadcast", status: 429, reason: "TooManyRequests", retryAfter: 7), .outcome(.retry(after: 7))),
            (SandboxFault(provider: "broadcast", status: 500, reason: "InternalServerError"), .outcome(.retry(after: nil))),
            (SandboxFault(provider: "broadcast", status: 503, reason: "ServiceUnavailable"), .outcome(.retry(after: nil))),
            (
                SandboxFault(provider: "broadcast", status: 403, reason: "InvalidProviderToken"),
                .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "InvalidProviderToken"))
            ),
            (
                SandboxFault(provider: "broadcast", status: 400, reason: "FeatureNotEnabled"),
                .outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "FeatureNotEnabled"))
            )
        ]
        for (fault, expected) in cases {
            var f = fault
            f.token = none.channelId
            f.times = 1
            h.sandbox.addFault(f)
            let r = client.sendBroadcast(broadcast(none.channelId))
            XCTAssertEqual(r.result, expected, "\(fault.status) \(fault.reason ?? "")")
            XCTAssertEqual(r.reason, fault.reason)
        }
        // The channel worker's adapter carries the 429's Retry-After into the decision
        // (ChannelRules.decide waits that long), as docs/channels.md says.
        h.sandbox.addFault(
            SandboxFault(provider: "broadcast", token: none.channelId, status: 429, reason: "TooManyRequests", retryAfter: 7, times: 1))
        let adapted = APNsChannelProvider(client: client).broadcast(
            BroadcastRequest(
                tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", apnsChannelId: none.channelId,
                body: paddedBody(100), priority: 10, expiration: 0, requestId: UUID().uuidString.lowercased()))
        XCTAssertEqual(adapted, .refused(status: 429, reason: "TooManyRequests", retryAfterSeconds: 7))
        // No credential for the bundle id: nothing is sent.
        let before = h.sandbox.stats.broadcastRequests
        let other = OutgoingBroadcast(
            tenantId: ProviderHarness.tenant, channelOperationId: "cop_x", environment: "sandbox", appId: "com.other.app",
            channelId: none.channelId, body: paddedBody(100), priority: 10, expiration: 0)
        if case .noCredentials = client.sendBroadcast(other).result {} else { XCTFail("no credential lists com.other.app") }
        XCTAssertEqual(h.sandbox.stats.broadcastRequests, before)
    }

    func testManagementRefusals() throws {
        // More than the channel limit is refused by APNs: the sandbox counts channels per bundle id.
        for _ in 0..<(Sandbox.maxChannelsPerBundle - 1) { h.sandbox.createChannel(bundleId: "com.example.c") }
        XCTAssertNoThrow(try create(app: "com.example.c"), "the 10,000th channel is created")
        let limit = client.createChannel(
            tenantId: ProviderHarness.tenant, appId: "com.example.c", environment: "sandbox",
            storagePolicy: .noMessageStored, timeoutSeconds: 10)
        XCTAssertEqual(refusal(limit)?.status, 400)
        XCTAssertEqual(refusal(limit)?.reason, "CannotCreateChannelConfig")
        // A key not registered for the bundle id.
        let narrow = P256PrivateKey.generate()
        h.sandbox.registerAPNsKey(teamId: "TEAMNARROW", keyId: "KEYNARROW1", publicKey: narrow.publicKey, topics: ["com.example.app"])
        h.source.set(
            "ten_narrow",
            TenantProviderCredentials(apns: [
                "sandbox": APNsCredential(
                    teamId: "TEAMNARROW", keyId: "KEYNARROW1", topics: ["com.example.app", "com.example.b"], environment: "sandbox",
                    privateKey: narrow)
            ]))
        let feature = client.createChannel(
            tenantId: "ten_narrow", appId: "com.example.b", environment: "sandbox", storagePolicy: .noMessageStored,
            timeoutSeconds: 10)
        XCTAssertEqual(refusal(feature)?.reason, "FeatureNotEnabled")
        XCTAssertNoThrow(
            try client.createChannel(
                tenantId: "ten_narrow", appId: "com.example.app", environment: "sandbox",
                storagePolicy: .noMessageStored, timeoutSeconds: 10
            ).get())
        // An unknown key → 403 InvalidProviderToken, reported as a credential failure.
        h.setUnknownAPNsKey(tenant: "ten_unknown")
        let denied = client.createChannel(
            tenantId: "ten_unknown", appId: app, environment: "production", storagePolicy: .noMessageStored,
            timeoutSeconds: 10)
        XCTAssertEqual(refusal(denied)?.status, 403)
        XCTAssertEqual(refusal(denied)?.reason, "InvalidProviderToken")
        XCTAssertEqual(h.source.reports.last?.failureReason, "403 InvalidProviderToken")
        // No credential at all.
        if case .failure(.noCredentials) = client.createChannel(
            tenantId: "ten_nobody", appId: app, environment: "sandbox",
            storagePolicy: .noMessageStored, timeoutSeconds: 10)
        {
        } else {
            XCTFail("no credential")
        }
        // The API's adapter keeps "no credential" apart from "no answer" (400 vs 502 at the API).
        XCTAssertEqual(APNsChannelProvider.management(.noCredentials("none")), .noCredentials(message: "none"))
        XCTAssertEqual(APNsChannelProvider.management(.notProcessed("refused")), .unavailable(message: "refused"))
        // 5xx is retryable; a delayed answer past the timeout is possibly processed.
        h.sandbox.addFault(SandboxFault(provider: "channels", status: 503, reason: "ServiceUnavailable", times: 1))
        let unavailable = client.createChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", storagePolicy: .noMessageStored,
            timeoutSeconds: 10)
        XCTAssertEqual(refusal(unavailable)?.status, 503)
        XCTAssertEqual(unavailable.failureValue?.isRetryable, true)
        h.sandbox.addFault(SandboxFault(provider: "channels", times: 1, delaySeconds: 2))
        let slow = client.createChannel(
            tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", storagePolicy: .noMessageStored,
            timeoutSeconds: 0.2)
        if case .failure(.possiblyProcessed) = slow {} else { XCTFail("a timed-out create is possibly processed: \(slow)") }
    }

    /// The same (team, key) JWT signs device pushes, channel management and broadcasts; an
    /// expired one is replaced once.
    func testJWTIsSharedWithPushesAndRefreshedOnce() throws {
        if case .outcome(.accepted) = h.sender.send(h.iosPush()) {} else { XCTFail("the device push is accepted") }
        let ch = try create()
        XCTAssertEqual(client.sendBroadcast(broadcast(ch.channelId)).status, 200)
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 1, "one JWT for pushes, management and broadcasts")
        XCTAssertEqual(h.sandbox.stats.providerTokens.count, 1)
        h.sandbox.addFault(SandboxFault(provider: "broadcast", token: ch.channelId, status: 403, reason: "ExpiredProviderToken", times: 1))
        let r = client.sendBroadcast(broadcast(ch.channelId))
        XCTAssertEqual(r.status, 200, "a new JWT and one retry")
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 2)
        XCTAssertEqual(h.sandbox.broadcasts(channelId: ch.channelId).count, 3)
        // Expired twice: the second answer is final, no loop.
        h.sandbox.addFault(SandboxFault(provider: "broadcast", token: ch.channelId, status: 403, reason: "ExpiredProviderToken", times: 2))
        XCTAssertEqual(
            client.sendBroadcast(broadcast(ch.channelId)).result,
            .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "ExpiredProviderToken")))
        XCTAssertEqual(h.sandbox.broadcasts(channelId: ch.channelId).count, 5)
        // The JWT ages out on the shared clock like any other: refreshed after 20 minutes.
        h.clock.advance(21 * 60)
        XCTAssertEqual(
            try client.listChannels(tenantId: ProviderHarness.tenant, appId: app, environment: "sandbox", timeoutSeconds: 10).get().channelIds,
            [ch.channelId])
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 4)
    }

    func testSubmitBroadcastDoesNotBlockAndReportsWritten() throws {
        let ch = try create()
        h.sandbox.addFault(SandboxFault(provider: "broadcast", token: ch.channelId, times: 1, delaySeconds: 1))
        let done = expectation(description: "completion")
        let written = expectation(description: "written")
        let returned = Locked(false)
        client.submitBroadcast(broadcast(ch.channelId), written: { written.fulfill() }) { r in
            XCTAssertEqual(r.status, 200)
            XCTAssertTrue(returned.withLock { $0 }, "submit returned before the (delayed) answer")
            done.fulfill()
        }
        returned.withLock { $0 = true }
        wait(for: [written, done], timeout: 15)
    }

    /// An update body of exactly `bytes` bytes.
    func paddedBody(_ bytes: Int) -> [UInt8] {
        let base = APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["p": ""]).bytes().count
        return APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["p": .string(String(repeating: "x", count: bytes - base))])
            .bytes()
    }
}

extension Result {
    var failureValue: Failure? { if case .failure(let f) = self { return f }; return nil }
}
