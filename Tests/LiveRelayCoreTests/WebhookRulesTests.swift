import Foundation
import XCTest
import LiveRelayCore

/// The pure webhook rules (docs/webhooks.md): URL shape, subscriptions, forbidden addresses,
/// the retry schedule and when to give up or disable.
final class WebhookRulesTests: XCTestCase {
    func ip4(_ s: String) -> [UInt8] { s.split(separator: ".").map { UInt8($0)! } }

    func ip6(_ s: String) -> [UInt8] {
        var a = in6_addr()
        XCTAssertEqual(inet_pton(AF_INET6, s, &a), 1, s)
        return withUnsafeBytes(of: &a) { Array($0) }
    }

    func testForbiddenAddresses() {
        for a in [
            "127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.0.1", "169.254.169.254", "0.0.0.0",
            "100.64.0.1", "224.0.0.1", "255.255.255.255", "198.18.0.1"
        ] {
            XCTAssertTrue(WebhookRules.isForbiddenAddress(ip4(a)), a)
        }
        for a in ["8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.1", "100.128.0.1", "192.169.0.1", "169.253.0.1"] {
            XCTAssertFalse(WebhookRules.isForbiddenAddress(ip4(a)), a)
        }
        for a in ["::1", "::", "fe80::1", "fc00::1", "fd12::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "ff02::1", "64:ff9b::a00:1"] {
            XCTAssertTrue(WebhookRules.isForbiddenAddress(ip6(a)), a)
        }
        for a in ["2606:4700::1111", "2a00:1450::1", "::ffff:8.8.8.8"] {
            XCTAssertFalse(WebhookRules.isForbiddenAddress(ip6(a)), a)
        }
        // IPv6 forms that embed an IPv4 address: refused when it is (6to4, IPv4-translated), or
        // always (Teredo, local-use NAT64); the same forms of a public address pass.
        for a in [
            "2002:7f00:1::1", "2002:a00:1::", "2002:a9fe:a9fe::1", "::ffff:0:127.0.0.1", "::ffff:0:10.1.2.3", "2001:0:4136:e378::1",
            "64:ff9b:1::808:808"
        ] {
            XCTAssertTrue(WebhookRules.isForbiddenAddress(ip6(a)), a)
        }
        for a in ["2002:808:808::1", "::ffff:0:8.8.8.8", "2001:4860::8888", "2001:db9::1"] {
            XCTAssertFalse(WebhookRules.isForbiddenAddress(ip6(a)), a)
        }
        XCTAssertTrue(WebhookRules.isForbiddenAddress([1, 2, 3]), "an address of unknown length is refused")
    }

    func testURLRules() throws {
        XCTAssertEqual(try WebhookRules.parseURL("https://Hooks.example.com/x?y=1", allowPrivate: false).port, 443)
        XCTAssertEqual(try WebhookRules.parseURL("https://[2606:4700::1]:8443/", allowPrivate: false).host, "2606:4700::1")
        XCTAssertThrowsError(try WebhookRules.parseURL("http://hooks.example.com/", allowPrivate: false))
        XCTAssertEqual(try WebhookRules.parseURL("http://127.0.0.1:8000/", allowPrivate: true).port, 8000)
        for bad in ["https://u:p@h.example/", "https://h.example/#f", "https:///x", "hooks.example.com", "https://h.example/a b"] {
            XCTAssertThrowsError(try WebhookRules.parseURL(bad, allowPrivate: true), bad) { e in
                XCTAssertEqual((e as? DomainError)?.details["field"], "url")
            }
        }
        let max = "https://h.example/" + String(repeating: "a", count: WebhookRules.maxURLLength - 18)
        XCTAssertNoThrow(try WebhookRules.parseURL(max, allowPrivate: false))
        XCTAssertThrowsError(try WebhookRules.parseURL(max + "a", allowPrivate: false))
    }

    func testSubscriptions() throws {
        XCTAssertEqual(try WebhookRules.parseEvents(["target.ended", "*"]), ["*", "target.ended"])
        XCTAssertThrowsError(try WebhookRules.parseEvents([]))
        XCTAssertThrowsError(try WebhookRules.parseEvents(nil))
        XCTAssertThrowsError(try WebhookRules.parseEvents(["target.ended", "target.ended"]))
        XCTAssertThrowsError(try WebhookRules.parseEvents(["target.started"])) { e in
            XCTAssertEqual((e as? DomainError)?.details["field"], "events.0")
        }
        XCTAssertEqual(EventType.allCases.count, 12)
    }

    func testRetryScheduleAndGivingUp() {
        // Ceilings 10, 20, 40, … s, capped at 6 h; full jitter below them.
        XCTAssertEqual(WebhookRules.retryDelay(attempts: 1, ageSeconds: 0, random: 0.999)!, 10 * 0.999, accuracy: 1e-9)
        XCTAssertLessThan(WebhookRules.retryDelay(attempts: 1, ageSeconds: 0, random: 0.9999999)!, 10, "the first retry comes within 10 s")
        XCTAssertEqual(WebhookRules.retryDelay(attempts: 2, ageSeconds: 0, random: 0.5)!, 10, accuracy: 1e-9)
        XCTAssertEqual(WebhookRules.retryDelay(attempts: 12, ageSeconds: 0, random: 0.5)!, 10240, accuracy: 1e-9)
        XCTAssertEqual(WebhookRules.retryDelay(attempts: 13, ageSeconds: 0, random: 0.5)!, 10800, accuracy: 1e-9, "capped at 6 h")
        XCTAssertEqual(WebhookRules.retryDelay(attempts: 60, ageSeconds: 0, random: 0.5)!, 10800, accuracy: 1e-9)
        // Give up only with ≥ 10 attempts AND ≥ 72 h.
        let h72 = 72.0 * 3600
        XCTAssertNotNil(WebhookRules.retryDelay(attempts: 9, ageSeconds: h72 * 2, random: 0.5), "fewer than 10 attempts: retry")
        XCTAssertNotNil(WebhookRules.retryDelay(attempts: 50, ageSeconds: h72 - 1, random: 0.5), "younger than 72 h: retry")
        XCTAssertNil(WebhookRules.retryDelay(attempts: 10, ageSeconds: h72, random: 0.5))
        XCTAssertFalse(WebhookRules.shouldDisable(failingSince: nil, now: Date()))
        let now = Date()
        XCTAssertFalse(WebhookRules.shouldDisable(failingSince: now.addingTimeInterval(-h72 + 1), now: now))
        XCTAssertTrue(WebhookRules.shouldDisable(failingSince: now.addingTimeInterval(-h72), now: now))
    }
}
