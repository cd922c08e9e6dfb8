import XCTest
@testable import LiveRelayCore

/// docs/write-semantics.md: capped exponential backoff with full jitter; outcome-unknown decisions.
final class RetryPolicyTests: XCTestCase {
    let p = RetryPolicy.standard

    func testDefaults() {
        XCTAssertEqual(p, RetryPolicy(base: 1, factor: 2, cap: 300))
        XCTAssertEqual((1...11).map { p.ceiling(attempt: $0) }, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300])
        XCTAssertEqual(p.ceiling(attempt: 0), 1)
        XCTAssertEqual(p.ceiling(attempt: -5), 1)
        XCTAssertEqual(p.ceiling(attempt: Int.max), 300)
    }

    func testBoundsNeverAboveCapNeverNegative() {
        let randoms: [Double] = [0, 0.1, 0.5, 0.999_999, 1.0.nextDown, 1, 7, -3, .nan, .infinity, -.infinity]
        for attempt in [-1, 0, 1, 2, 5, 9, 10, 30, 64, 1000, Int.max] {
            for r in randoms {
                let d = p.delay(attempt: attempt, random: r)
                XCTAssertGreaterThanOrEqual(d, 0, "attempt \(attempt) random \(r)")
                XCTAssertLessThan(d, p.ceiling(attempt: attempt) + 1e-9, "attempt \(attempt) random \(r)")
                XCTAssertLessThanOrEqual(d, 300)
            }
        }
        XCTAssertEqual(p.delay(attempt: 1, random: 0), 0)
        XCTAssertEqual(p.delay(attempt: 3, random: 0.5), 2)
        XCTAssertEqual(p.delay(attempt: 20, random: 0.5), 150)
    }

    func testRetryAfterIsAFloor() {
        XCTAssertEqual(p.delay(attempt: 1, random: 0.5, retryAfter: 30), 30)
        XCTAssertEqual(p.delay(attempt: 3, random: 0.5, retryAfter: 0.1), 2, "jitter above the floor stays")
        XCTAssertEqual(p.delay(attempt: 1, random: 0.5, retryAfter: 600), 600, "provider's word wins over the cap")
        XCTAssertEqual(p.delay(attempt: 3, random: 0.5, retryAfter: -10), 2)
        XCTAssertEqual(p.delay(attempt: 3, random: 0.5, retryAfter: .nan), 2)
        for a in 1...20 {
            for r in stride(from: 0.0, to: 1, by: 0.05) {
                XCTAssertGreaterThanOrEqual(p.delay(attempt: a, random: r, retryAfter: 42), 42)
            }
        }
    }

    func testUnknownOutcomeMatrix() {
        for kind in PushEvent.allCases {
            for hasState in [false, true] {
                for hasAlert in [false, true] {
                    let expected: UnknownOutcomeAction = (kind == .start || hasAlert) ? .markUnknown : .resend
                    XCTAssertEqual(
                        RetryPolicy.onUnknownOutcome(kind: kind, hasState: hasState, hasAlert: hasAlert), expected,
                        "\(kind) state=\(hasState) alert=\(hasAlert)")
                    XCTAssertEqual(RetryPolicy.onInterruption(.outcomeUnknown, kind: kind, hasState: hasState, hasAlert: hasAlert), expected)
                    XCTAssertEqual(
                        RetryPolicy.onInterruption(.notProcessed, kind: kind, hasState: hasState, hasAlert: hasAlert), .resend,
                        "not processed is always resent: \(kind)")
                }
            }
        }
        // The docs/write-semantics.md rows spelled out.
        XCTAssertEqual(RetryPolicy.onUnknownOutcome(kind: .update, hasState: true, hasAlert: false), .resend)
        XCTAssertEqual(RetryPolicy.onUnknownOutcome(kind: .end, hasState: false, hasAlert: false), .resend)
        XCTAssertEqual(RetryPolicy.onUnknownOutcome(kind: .end, hasState: true, hasAlert: false), .resend)
        XCTAssertEqual(RetryPolicy.onUnknownOutcome(kind: .start, hasState: true, hasAlert: true), .markUnknown)
        XCTAssertEqual(RetryPolicy.onUnknownOutcome(kind: .update, hasState: true, hasAlert: true), .markUnknown)
    }
}
