import Foundation
import Crypto
@testable import Delivery
import HTTP2
import JSON
import LiveRelayCore
import LiveRelaySandbox
import XCTest
import LiveRelayTestSupport

/// `ProviderSender` → APNs against the sandbox over real TLS and HTTP/2 (docs/providers.md).
final class APNsSenderTests: ProviderTestCase {

    func testAcceptedPushCarriesSpecHeadersAndReturnsApnsId() throws {
        let push = h.iosPush()
        XCTAssertEqual(h.sender.send(push), .outcome(.accepted(providerId: push.apnsId)))
        let d = try XCTUnwrap(h.sandbox.deliveries(token: push.deviceToken).first)
        XCTAssertEqual(d.status, 200)
        XCTAssertEqual(d.headers["apns-topic"], "com.example.app.push-type.liveactivity")
        XCTAssertEqual(d.headers["apns-push-type"], "liveactivity")
        XCTAssertEqual(d.headers["apns-priority"], "10")
        XCTAssertEqual(d.headers["apns-id"], push.apnsId)
        XCTAssertEqual(d.headers["apns-expiration"], String(Int64(push.expiration.timeIntervalSince1970)))
        XCTAssertEqual(d.jwtKeyId, h.sandbox.keyId)
        XCTAssertEqual(d.payload["aps"]?["event"]?.stringValue, "update")
        XCTAssertEqual(
            h.metrics.counter("liverelay_provider_responses_total", help: "", labels: ["provider", "status", "reason"])
                .value(["apns", "200", ""]), 1)
        XCTAssertEqual(h.source.reports.last?.failureReason, nil)
        XCTAssertEqual(h.source.reports.last?.fingerprint, h.sandbox.apnsKey.publicKey.fingerprint)
        XCTAssertFalse(h.logText.contains(push.deviceToken), "device tokens are never logged")
    }

    /// A tenant that stores another tenant's team and key id with its own private key gets its
    /// own connections (docs/providers.md "APNs": pools are keyed by the key's fingerprint too).
    /// APNs counts provider-token changes per connection, so sharing them would let the second
    /// tenant's tokens alternate with the first's on the first's connections.
    func testAKeyWithAnotherTenantsTeamAndKeyIdGetsItsOwnConnections() throws {
        let other = "ten_other"
        h.source.set(
            other,
            TenantProviderCredentials(apns: [
                "sandbox": APNsCredential(
                    teamId: h.sandbox.teamId, keyId: h.sandbox.keyId, topics: ["com.example.app"], environment: "sandbox",
                    privateKey: P256PrivateKey.generate())
            ]))
        let first = h.iosPush()
        XCTAssertEqual(h.sender.send(first), .outcome(.accepted(providerId: first.apnsId)))
        XCTAssertEqual(h.sender.apns.pools.count, 1)
        let impostor = h.iosPush(tenant: other)
        XCTAssertEqual(
            h.sender.send(impostor),
            .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "InvalidProviderToken")))
        XCTAssertEqual(h.sender.apns.pools.count, 2, "the other key's pushes went out on their own pool")
        let second = h.iosPush()
        XCTAssertEqual(h.sender.send(second), .outcome(.accepted(providerId: second.apnsId)))
        XCTAssertEqual(h.sender.apns.pools.count, 2)
        let keyIds = try [first, second].map { try XCTUnwrap(h.sandbox.deliveries(token: $0.deviceToken).first).jwtKeyId }
        XCTAssertEqual(keyIds, [h.sandbox.keyId, h.sandbox.keyId])
    }

    /// Every APNs response class of docs/providers.md through sandbox fault injection.
    func testEveryResponseClassMapsToItsOutcome() throws {
        let cases: [(SandboxFault, PushResult)] = [
            (SandboxFault(status: 410, reason: "Unregistered"), .outcome(.tokenDead(providerStatus: 410, providerReason: "Unregistered"))),
            (SandboxFault(status: 410, reason: "ExpiredToken"), .outcome(.tokenDead(providerStatus: 410, providerReason: "ExpiredToken"))),
            (SandboxFault(status: 400, reason: "BadDeviceToken"), .outcome(.tokenDead(providerStatus: 400, providerReason: "BadDeviceToken"))),
            (
                SandboxFault(status: 400, reason: "BadTopic"),
                .outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "BadTopic"))
            ),
            (
                SandboxFault(status: 403, reason: "InvalidProviderToken"),
                .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "InvalidProviderToken"))
            ),
            (
                SandboxFault(status: 413, reason: "PayloadTooLarge"),
                .outcome(.failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: "PayloadTooLarge"))
            ),
            (SandboxFault(status: 429, reason: "TooManyRequests"), .outcome(.retry(after: nil))),
            (SandboxFault(status: 429, reason: "TooManyRequests", retryAfter: 3), .outcome(.retry(after: 3))),
            (SandboxFault(status: 500, reason: "InternalServerError"), .outcome(.retry(after: nil))),
            (SandboxFault(status: 503, reason: "ServiceUnavailable"), .outcome(.retry(after: nil)))
        ]
        for (fault, expected) in cases {
            let push = h.iosPush()
            var f = fault
            f.token = push.deviceToken
            h.sandbox.addFault(f)
            XCTAssertEqual(h.sender.send(push), expected, "\(fault.status) \(fault.reason ?? "")")
            XCTAssertEqual(h.sandbox.deliveries(token: push.deviceToken).count, 1, "no automatic resend inside the sender")
        }
        // Real (not injected) answers: a dead token, an oversized body, a key APNs does not know.
        let dead = h.iosPush()
        h.sandbox.markDead(dead.deviceToken)
        XCTAssertEqual(h.sender.send(dead), .outcome(.tokenDead(providerStatus: 410, providerReason: "Unregistered")))
        let big = h.iosPush(
            body: APNsPayload(event: .update, timestamp: Date(), contentState: ["s": .string(String(repeating: "x", count: 5000))]).bytes())
        XCTAssertEqual(h.sender.send(big), .outcome(.failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: "PayloadTooLarge")))
        let unknown = h.setUnknownAPNsKey(tenant: "ten_other")
        XCTAssertEqual(
            h.sender.send(h.iosPush(tenant: "ten_other")),
            .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "InvalidProviderToken")))
        let failure = try XCTUnwrap(h.source.reports.last)
        XCTAssertEqual(failure.tenantId, "ten_other")
        XCTAssertEqual(failure.fingerprint, unknown.publicKey.fingerprint)
        XCTAssertEqual(failure.failureReason, "403 InvalidProviderToken")
        let counter = h.metrics.counter("liverelay_provider_responses_total", help: "", labels: ["provider", "status", "reason"])
        XCTAssertEqual(counter.value(["apns", "410", "Unregistered"]), 2)
        XCTAssertEqual(counter.value(["apns", "403", "InvalidProviderToken"]), 2)
    }

    func testNoCredentialsForUnknownTenantOrTopic() {
        if case .noCredentials = h.sender.send(h.iosPush(tenant: "ten_nobody")) {} else { XCTFail("unknown tenant") }
        if case .noCredentials(let why) = h.sender.send(h.iosPush(appId: "com.other.app")) {
            XCTAssertTrue(why.contains("com.other.app"), why)
        } else {
            XCTFail("unlisted topic")
        }
        // A production installation uses the sandbox-environment key when it is the only one listing the topic.
        if case .outcome(.accepted) = h.sender.send(h.iosPush(environment: "production")) {} else { XCTFail("environment fallback") }
        XCTAssertEqual(h.sandbox.stats.apnsRequests, 1)
    }

    func testOneProviderTokenIsSharedByEveryTopic() {
        for i in 0..<15 {
            let push = h.iosPush(appId: ProviderHarness.topics[i % 3])
            if case .outcome(.accepted) = h.sender.send(push) {} else { XCTFail("push \(i)") }
        }
        XCTAssertEqual(h.sandbox.stats.providerTokens.count, 1)
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 1)
        XCTAssertEqual(Set(h.sandbox.deliveries(provider: "apns").compactMap { $0.headers["apns-topic"] }).count, 3)
    }

    /// Two simulated hours at one push per 30 s against Apple's strict rule (one new token per
    /// 20 minutes): no TooManyProviderTokenUpdates, the token changes only every ≥ 20 min and
    /// no token is used at 60 min of age or older.
    func testTwoSimulatedHoursWithoutTokenChurn() throws {
        let strict = try ProviderHarness(tokenUpdatesPer20Minutes: 1)
        defer { strict.tearDown() }
        let start = Int64(strict.clock.now().timeIntervalSince1970)
        for i in 0..<240 {
            let result = strict.sender.send(strict.iosPush(appId: ProviderHarness.topics[i % 3]))
            guard case .outcome(.accepted) = result else { return XCTFail("push \(i) at +\(i * 30) s: \(result)") }
            strict.clock.advance(30)
        }
        let stats = strict.sandbox.stats
        XCTAssertEqual(stats.tooManyProviderTokenUpdates, 0)
        XCTAssertEqual(stats.expiredProviderTokens, 0)
        let iats = stats.providerTokens.map(\.issuedAt)
        XCTAssertEqual(iats.first, start)
        XCTAssertEqual(iats.count, 6, "one token per 20 minutes over 2 hours: \(iats.map { $0 - start })")
        for (a, b) in zip(iats, iats.dropFirst()) {
            XCTAssertGreaterThanOrEqual(b - a, 1200, "refreshed before 20 min")
            XCTAssertLessThan(b - a, 3600, "a new iat after 60 min at the latest")
        }
        for d in strict.sandbox.deliveries() {
            let age = Int64(d.receivedAt.timeIntervalSince1970) - (d.jwtIssuedAt ?? 0)
            XCTAssertLessThan(age, 3600)
        }
        XCTAssertEqual(strict.sender.apnsTokens.mintedCount, 6)
    }

    func testExpiredProviderTokenRefreshesOnceAndRetriesOnce() throws {
        let push = h.iosPush()
        assertAccepted(h.sender.send(h.iosPush()))  // warm: token 1
        h.sandbox.addFault(SandboxFault(provider: "apns", token: push.deviceToken, status: 403, reason: "ExpiredProviderToken", times: 1))
        XCTAssertEqual(h.sender.send(push), .outcome(.accepted(providerId: push.apnsId)))
        let seen = h.sandbox.deliveries(token: push.deviceToken)
        XCTAssertEqual(seen.map(\.status), [403, 200], "exactly one retry")
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 2, "exactly one refresh")
        XCTAssertEqual(h.sandbox.stats.providerTokens.count, 2)
        // The refreshed token is reused afterwards.
        if case .outcome(.accepted) = h.sender.send(h.iosPush()) {} else { XCTFail("after refresh") }
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 2)
    }

    /// The sandbox clock runs 61 minutes ahead of the sender's: every token it sends is expired.
    /// One refresh, one retry, then a final failure — never a loop.
    func testExpiredProviderTokenAgainAfterRefreshFailsWithoutLooping() {
        h.sandboxOffset.withLock { $0 = 61 * 60 }
        let push = h.iosPush()
        XCTAssertEqual(
            h.sender.send(push),
            .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "ExpiredProviderToken")))
        XCTAssertEqual(h.sandbox.deliveries(token: push.deviceToken).map(\.status), [403, 403])
        XCTAssertEqual(h.sender.apnsTokens.mintedCount, 2)
        XCTAssertEqual(h.source.reports.last?.failureReason, "403 ExpiredProviderToken")
    }

    /// GOAWAY while a batch is in flight on one connection: the streams up to `last_stream_id`
    /// are answered, the ones above are `notProcessed` — and provably were not processed (the
    /// sandbox never saw them); resending them delivers every push exactly once.
    func testGoawayMidBatchIsNotProcessedAndResendDeliversExactlyOnce() throws {
        let one = try ProviderHarness(maxConnections: 1)
        defer { one.tearDown() }
        assertAccepted(one.sender.send(one.iosPush()))  // connection up
        one.sandbox.setConnectionFaults(HTTP2ServerFaults(goawayAfterStreams: 6, responseDelaySeconds: 0.3))
        let pushes = (0..<20).map { _ in one.iosPush() }
        let results = concurrently(20, threads: 20) { i in one.sender.send(pushes[i]) }
        var pending: [OutgoingPush] = []
        var accepted: [OutgoingPush] = []
        var reasons: [String] = []
        for (i, r) in results.enumerated() {
            switch r {
            case .outcome(.accepted): accepted.append(pushes[i])
            case .notProcessed(let why): pending.append(pushes[i]); reasons.append(why)
            default: XCTFail("push \(i): \(r)")
            }
        }
        XCTAssertGreaterThanOrEqual(accepted.count, 5, "streams 2…6 of the first connection are answered")
        XCTAssertFalse(pending.isEmpty, "streams above last_stream_id are not processed")
        // "above GOAWAY last_stream_id", or, for a thread that only submitted after the GOAWAY
        // arrived (a loaded machine), "not usable"/"before the request was sent": all not processed.
        XCTAssertTrue(
            reasons.allSatisfy {
                $0.contains("GOAWAY") || $0.contains("not usable") || $0.contains("before the request was sent")
                    || $0.contains("never written")
            }, "\(reasons)")
        for p in pending { XCTAssertEqual(one.sandbox.deliveries(token: p.deviceToken).count, 0, "notProcessed means the sandbox never saw it") }
        one.sandbox.clearFaults()
        for p in pending { assertAccepted(one.sender.send(p)) }
        for p in pushes {
            XCTAssertEqual(one.sandbox.deliveries(token: p.deviceToken).filter(\.accepted).count, 1, "delivered exactly once")
        }
        let counter = one.metrics.counter("liverelay_provider_responses_total", help: "", labels: ["provider", "status", "reason"])
        XCTAssertEqual(counter.value(["apns", "none", "not_processed"]), Double(pending.count))
    }

    func testDroppedConnectionAfterSendingIsPossiblyProcessed() {
        assertAccepted(h.sender.send(h.iosPush()))
        h.sandbox.setConnectionFaults(HTTP2ServerFaults(dropConnectionAfterRequest: 2))
        let push = h.iosPush()
        if case .possiblyProcessed = h.sender.send(push) {} else { XCTFail("dropped connection must be possiblyProcessed") }
        // The sandbox's handler records the delivery on its own thread, racing the dropped
        // connection that the client saw: wait (bounded) for the record.
        let deadline = Date().addingTimeInterval(5)
        while h.sandbox.deliveries(token: push.deviceToken).isEmpty && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertEqual(h.sandbox.deliveries(token: push.deviceToken).count, 1, "the sandbox did process it")
        h.sandbox.clearFaults()
        if case .outcome(.accepted) = h.sender.send(h.iosPush()) {} else { XCTFail("a new connection after the drop") }
    }

    func testUnreachableOrUntrustedProviderIsNotProcessed() throws {
        var e = h.endpoints
        e.apnsSandboxURL = URL(string: "https://127.0.0.1:1")!
        let closed = ProviderSender(source: h.source, endpoints: e, metrics: h.metrics, log: .init(minimum: .error))
        defer { closed.close() }
        if case .notProcessed = closed.send(h.iosPush()) {} else { XCTFail("connection refused") }
        e = h.endpoints
        e.extraCAFile = nil
        let untrusted = ProviderSender(source: h.source, endpoints: e, metrics: h.metrics, log: .init(minimum: .error))
        defer { untrusted.close() }
        if case .notProcessed(let why) = untrusted.send(h.iosPush()) { XCTAssertTrue(why.contains("TLS"), why) } else { XCTFail("untrusted CA") }
        XCTAssertEqual(h.sandbox.stats.apnsRequests, 0)
    }
}

/// Fails unless `result` is `.outcome(.accepted)`.
func assertAccepted(_ result: PushResult, file: StaticString = #filePath, line: UInt = #line) {
    if case .outcome(.accepted) = result { return }
    XCTFail("expected accepted, got \(result)", file: file, line: line)
}
