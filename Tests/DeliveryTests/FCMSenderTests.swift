import Foundation
import Crypto
import Delivery
import JSON
import LiveRelayCore
import LiveRelaySandbox
import XCTest
import LiveRelayTestSupport

/// `ProviderSender` → FCM HTTP v1 + OAuth2 against the sandbox over real TLS and HTTP/2 (docs/providers.md).
final class FCMSenderTests: ProviderTestCase {

    func testHundredSendsNeedExactlyOneTokenRequest() {
        let pushes = (0..<100).map { _ in h.androidPush() }
        let results = concurrently(100, threads: 8) { [h] i in h!.sender.send(pushes[i]) }
        for (i, r) in results.enumerated() {
            if case .outcome(.accepted(let name)) = r {
                XCTAssertTrue(name?.hasPrefix("projects/\(h.sandbox.projectId)/messages/") == true)
            } else {
                XCTFail("push \(i): \(r)")
            }
        }
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 1)
        XCTAssertEqual(h.sender.fcmTokens.tokenRequestCount, 1)
        XCTAssertEqual(h.sandbox.deliveries(provider: "fcm").filter(\.accepted).count, 100)
        let d = h.sandbox.deliveries(token: pushes[0].deviceToken)[0]
        XCTAssertEqual(d.payload["message"]?["android"]?["priority"]?.stringValue, "HIGH")
        XCTAssertEqual(d.payload["message"]?["data"]?["event"]?.stringValue, "update")
        XCTAssertFalse(h.logText.contains("ya29."), "access tokens are never logged")
    }

    func testAccessTokenIsCachedUntilFiveMinutesBeforeExpiry() {
        assertAccepted(h.sender.send(h.androidPush()))
        h.clock.advance(3599 - 301)
        assertAccepted(h.sender.send(h.androidPush()))
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 1)
        h.clock.advance(2)  // now within 5 minutes of expiry
        assertAccepted(h.sender.send(h.androidPush()))
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 2)
    }

    func test401RefreshesTheAccessTokenOnceAndRetriesOnce() {
        assertAccepted(h.sender.send(h.androidPush()))
        h.sandbox.revokeAccessTokens()  // the cached token is now unknown to "Google"
        let push = h.androidPush()
        assertAccepted(h.sender.send(push))
        XCTAssertEqual(h.sandbox.deliveries(token: push.deviceToken).map(\.status), [401, 200])
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 2)
        assertAccepted(h.sender.send(h.androidPush()))
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 2, "the new token is cached")
    }

    func test401AgainAfterRefreshFailsWithoutLooping() {
        let push = h.androidPush()
        h.sandbox.addFault(SandboxFault(provider: "fcm", token: push.deviceToken, status: 401))
        XCTAssertEqual(
            h.sender.send(push), .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 401, providerReason: "UNAUTHENTICATED")))
        XCTAssertEqual(h.sandbox.deliveries(token: push.deviceToken).map(\.status), [401, 401])
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 2, "one initial token, one refresh")
        XCTAssertEqual(h.source.reports.last?.failureReason, "401 UNAUTHENTICATED")
    }

    func testRetryAfterIsSurfaced() {
        let push = h.androidPush()
        h.sandbox.addFault(SandboxFault(provider: "fcm", token: push.deviceToken, status: 429, reason: "QUOTA_EXCEEDED", retryAfter: 3))
        XCTAssertEqual(h.sender.send(push), .outcome(.retry(after: 3)))
    }

    func testErrorMatrix() {
        let cases: [(SandboxFault, PushResult)] = [
            (SandboxFault(status: 404, reason: "UNREGISTERED"), .outcome(.tokenDead(providerStatus: 404, providerReason: "UNREGISTERED"))),
            (
                SandboxFault(status: 400, reason: "INVALID_ARGUMENT"),
                .outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "INVALID_ARGUMENT"))
            ),
            (
                SandboxFault(status: 403, reason: "SENDER_ID_MISMATCH"),
                .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403, providerReason: "SENDER_ID_MISMATCH"))
            ),
            (SandboxFault(status: 500, reason: "INTERNAL"), .outcome(.retry(after: nil))),
            (SandboxFault(status: 503, reason: "UNAVAILABLE", retryAfter: 10), .outcome(.retry(after: 10)))
        ]
        for (fault, expected) in cases {
            let push = h.androidPush()
            var f = fault
            f.token = push.deviceToken
            h.sandbox.addFault(f)
            XCTAssertEqual(h.sender.send(push), expected, "\(fault.status)")
        }
        let dead = h.androidPush()
        h.sandbox.markDead(dead.deviceToken)
        XCTAssertEqual(h.sender.send(dead), .outcome(.tokenDead(providerStatus: 404, providerReason: "UNREGISTERED")))
        // A non-string data value is rejected by the sandbox as FCM does.
        let bad = h.androidPush(body: Array(#"{"message":{"token":"t1","data":{"revision":2}}}"#.utf8))
        XCTAssertEqual(h.sender.send(bad), .outcome(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "INVALID_ARGUMENT")))
    }

    func testRejectedServiceAccountFailsBeforeAnyMessageIsSent() {
        h.source.set(
            "ten_rogue",
            TenantProviderCredentials(
                fcm: FCMCredential(
                    projectId: h.sandbox.projectId, clientEmail: h.sandbox.clientEmail, privateKeyId: "k1", tokenURI: h.sandbox.tokenURI,
                    privateKey: RSAPrivateKey.generate())))
        XCTAssertEqual(
            h.sender.send(h.androidPush(tenant: "ten_rogue")),
            .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 400, providerReason: "oauth: invalid_grant")))
        XCTAssertEqual(h.sandbox.stats.fcmRequests, 0)
        // The token endpoint overloaded: retry later; the message was not sent.
        h.sandbox.addFault(SandboxFault(provider: "oauth", status: 503, retryAfter: 2, times: 1))
        XCTAssertEqual(h.sender.send(h.androidPush()), .outcome(.retry(after: 2)))
        XCTAssertEqual(h.sandbox.stats.fcmRequests, 0)
        h.clock.advance(FCMAccessTokenCache.failureCacheSeconds)  // the failure is remembered that long
        assertAccepted(h.sender.send(h.androidPush()))
        if case .noCredentials = h.sender.send(h.androidPush(tenant: "ten_nobody")) {} else { XCTFail("no FCM credential") }
    }

    func testDroppedConnectionAndGoawayMapToUnknownAndNotProcessed() throws {
        assertAccepted(h.sender.send(h.androidPush()))
        h.sandbox.setConnectionFaults(.init(dropConnectionAfterRequest: 2))
        if case .possiblyProcessed = h.sender.send(h.androidPush()) {} else { XCTFail("dropped after sending") }
        h.sandbox.clearFaults()
        h.sandbox.setConnectionFaults(.init(refuseStreamsAfter: 0))
        if case .notProcessed = h.sender.send(h.androidPush()) {} else { XCTFail("refused stream") }
        h.sandbox.clearFaults()
        assertAccepted(h.sender.send(h.androidPush()))
    }
}
