import Foundation
import Crypto
import Delivery
import JSON
import LiveRelayCore
import LiveRelaySandbox
import Locking
#if canImport(Glibc)
import Glibc
#endif
import XCTest
import LiveRelayTestSupport

/// FCM OAuth hardening (docs/security.md "Provider credentials"), against the sandbox over real
/// TLS and HTTP/2: single-flight token fetches with failures remembered briefly, and a stored
/// `token_uri` off the allowed origins is never contacted.
final class FCMTokenHardeningTests: ProviderTestCase {

    func testAFailingTokenEndpointIsAskedOnceForManyConcurrentSendsThenAgainAfterTheFailureCache() {
        // A service account the sandbox ("Google") does not know: every token request is refused.
        h.source.set(
            "ten_rogue",
            TenantProviderCredentials(
                fcm: FCMCredential(
                    projectId: h.sandbox.projectId, clientEmail: "rogue@demo-project.iam.gserviceaccount.com", privateKeyId: "k1",
                    tokenURI: h.sandbox.tokenURI, privateKey: RSAPrivateKey.generate())))
        let expected = PushResult.outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 400, providerReason: "oauth: invalid_grant"))
        let results = concurrently(32, threads: 16) { [h] _ in h!.sender.send(h!.androidPush(tenant: "ten_rogue")) }
        for r in results { XCTAssertEqual(r, expected) }
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 1, "one fetch answered all 32 senders")
        XCTAssertEqual(h.sender.send(h.androidPush(tenant: "ten_rogue")), expected)
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 1, "the failure is remembered")
        h.clock.advance(FCMAccessTokenCache.failureCacheSeconds)
        XCTAssertEqual(h.sender.send(h.androidPush(tenant: "ten_rogue")), expected)
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 2, "asked again once the failure expired")
        XCTAssertEqual(h.sandbox.stats.fcmRequests, 0)
        // Another tenant's healthy account is not held up by it.
        assertAccepted(h.sender.send(h.androidPush()))
    }

    /// A cold access-token cache fetches on a thread of its own: submitting an Android push
    /// returns at once while the token endpoint takes 2 s, so the dispatcher's submitter threads
    /// (shared by every tenant) never wait for Google; the push is sent when the token comes.
    func testSubmitDoesNotWaitForTheTokenEndpoint() {
        h.sandbox.addFault(SandboxFault(provider: "oauth", times: 1, delaySeconds: 2))
        let done = DispatchSemaphore(value: 0)
        let result = Locked<PushResult?>(nil)
        let began = Date()
        h.sender.submit(h.androidPush(), written: nil) { r in
            result.withLock { $0 = r }
            done.signal()
        }
        XCTAssertLessThan(Date().timeIntervalSince(began), 0.5, "submit returned before the token came")
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(began), 2, "sent once the token came")
        if let r = result.withLock({ $0 }) { assertAccepted(r) } else { XCTFail("no result") }
        XCTAssertEqual(h.sandbox.stats.tokenRequests, 1)
    }

    func testAStoredTokenURIOffTheAllowedOriginsIsNeverContacted() throws {
        let trap = try TCPTrap()
        defer { trap.close() }
        h.source.set(
            "ten_ssrf",
            TenantProviderCredentials(
                fcm: FCMCredential(
                    projectId: h.sandbox.projectId, clientEmail: h.sandbox.clientEmail, privateKeyId: "k1",
                    tokenURI: "https://127.0.0.1:\(trap.port)/token", privateKey: h.sandbox.serviceAccountKey)))
        let r = h.sender.send(h.androidPush(tenant: "ten_ssrf"))
        XCTAssertEqual(r, .outcome(.failed(code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 0, providerReason: "oauth: token_uri not allowed")))
        XCTAssertEqual(trap.acceptedConnections(), 0, "no connection to the tenant-chosen address")
        XCTAssertEqual(h.sandbox.stats.fcmRequests, 0)
    }

    func assertAccepted(_ r: PushResult, file: StaticString = #filePath, line: UInt = #line) {
        if case .outcome(.accepted) = r { return }
        XCTFail("not accepted: \(r)", file: file, line: line)
    }
}

/// A listening loopback TCP socket that only counts the connections made to it.
final class TCPTrap: @unchecked Sendable {  // fd is used from the test thread only
    let fd: Int32
    let port: Int

    init() throws {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let size = len
        let ok = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, size) == 0 && listen(s, 16) == 0 }
        }
        guard ok else { throw NSError(domain: "TCPTrap", code: Int(errno)) }
        _ = withUnsafeMutablePointer(to: &addr) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) } }
        _ = fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK)
        fd = s
        port = Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Connections waiting in the backlog (each accepted and closed).
    func acceptedConnections() -> Int {
        var n = 0
        while true {
            let c = accept(fd, nil, nil)
            if c < 0 { return n }
            Glibc.close(c)
            n += 1
        }
    }

    func close() { Glibc.close(fd) }
}
