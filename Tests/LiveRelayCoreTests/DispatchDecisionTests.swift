import Foundation
import XCTest
import LiveRelayCore

/// The dispatcher's transition table (docs/write-semantics.md, docs/providers.md), row by row.
final class DispatchDecisionTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func facts(
        _ kind: PushEvent, state: Bool = true, alert: Bool = false, quota: Bool = true, attempts: Int = 1,
        expiresAt: Date? = nil, platform: String = "ios"
    ) -> DispatchOperationFacts {
        DispatchOperationFacts(
            kind: kind, hasState: state, hasAlert: alert, consumesQuota: quota, attempts: attempts,
            expiresAt: expiresAt, platform: platform)
    }

    func decide(_ f: DispatchOperationFacts, _ r: DispatchAttemptResult, random: Double = 0.5) -> DispatchDecision {
        DispatchDecision.decide(f, r, now: now, random: random, policy: .standard)
    }

    // MARK: accepted

    func testAcceptedPerKind() {
        let start = decide(facts(.start, alert: true), .provider(.accepted(providerId: "id-1")))
        XCTAssertEqual(start, DispatchDecision(operation: .accepted(providerId: "id-1"), quota: .consume, target: .startAccepted))
        let update = decide(facts(.update), .provider(.accepted(providerId: nil)))
        XCTAssertEqual(update, DispatchDecision(operation: .accepted(providerId: nil), quota: .consume))
        let end = decide(facts(.end, state: false, quota: false), .provider(.accepted(providerId: nil)))
        XCTAssertEqual(
            end,
            DispatchDecision(
                operation: .accepted(providerId: nil), quota: .none, target: .ended(reason: "sender"),
                cancelQueued: "already_ended"))
        XCTAssertTrue(end.isFinal)
    }

    // MARK: dead tokens

    func testDeadTokenPerTokenKind() {
        let dead = DispatchAttemptResult.provider(.tokenDead(providerStatus: 410, providerReason: "Unregistered"))
        let upd = decide(facts(.update), dead)
        XCTAssertEqual(upd.operation.status, .failed)
        guard case .failed(let f) = upd.operation else { return XCTFail() }
        XCTAssertEqual(f.code, "TOKEN_INVALID"); XCTAssertEqual(f.providerStatus, 410); XCTAssertEqual(f.providerReason, "Unregistered")
        XCTAssertEqual(upd.quota, .release)
        XCTAssertEqual(upd.target, .ended(reason: "token_invalid"))
        XCTAssertEqual(upd.cancelQueued, "token_invalid")
        XCTAssertEqual(upd.deadToken, .endTarget(endReason: "token_invalid"))

        let start = decide(facts(.start, alert: true), dead)
        XCTAssertEqual(start.deadToken, .startTargetPending)
        XCTAssertEqual(start.target, .creationFailed)
        XCTAssertEqual(start.cancelQueued, "creation_failed")
        XCTAssertEqual(start.quota, .release)

        let android = decide(facts(.update, platform: "android"), .provider(.tokenDead(providerStatus: 404, providerReason: "UNREGISTERED")))
        XCTAssertEqual(android.deadToken, .clearInstallationFCMToken)
        XCTAssertEqual(android.target, .none, "the target waits for a new FCM token instead of ending")
        XCTAssertNil(android.cancelQueued)

        let androidStart = decide(facts(.start, alert: true, platform: "android"), .provider(.tokenDead(providerStatus: 404, providerReason: nil)))
        XCTAssertEqual(androidStart.deadToken, .clearInstallationFCMToken)
        XCTAssertEqual(androidStart.target, .creationFailed)

        let statelessEnd = decide(facts(.end, state: false, quota: false), dead)
        XCTAssertEqual(statelessEnd.quota, .none, "stateless ends never count")
        XCTAssertEqual(statelessEnd.target, .ended(reason: "token_invalid"))
    }

    // MARK: failures

    func testFailuresReleaseQuotaAndFailStarts() {
        let creds = decide(
            facts(.update),
            .provider(
                .failed(
                    code: "PROVIDER_CREDENTIALS_INVALID", providerStatus: 403,
                    providerReason: "InvalidProviderToken")))
        guard case .failed(let f) = creds.operation else { return XCTFail() }
        XCTAssertEqual(f.code, "PROVIDER_CREDENTIALS_INVALID"); XCTAssertEqual(f.providerStatus, 403)
        XCTAssertEqual(f.providerReason, "InvalidProviderToken"); XCTAssertFalse(f.message.isEmpty)
        XCTAssertEqual(creds.quota, .release); XCTAssertEqual(creds.target, .none)

        let tooLarge = decide(facts(.start, alert: true), .provider(.failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: nil)))
        XCTAssertEqual(tooLarge.target, .creationFailed)
        XCTAssertEqual(tooLarge.cancelQueued, "creation_failed")

        let none = decide(facts(.update), .noCredentials("no key"))
        guard case .failed(let g) = none.operation else { return XCTFail() }
        XCTAssertEqual(g.code, "PROVIDER_CREDENTIALS_INVALID"); XCTAssertNil(g.providerStatus)
        XCTAssertEqual(none.quota, .release)

        let build = decide(facts(.end, state: false, quota: false), .notSendable(code: "PAYLOAD_TOO_LARGE", message: "too big"))
        XCTAssertEqual(build.operation, .failed(.init(code: "PAYLOAD_TOO_LARGE", message: "too big")))
        XCTAssertEqual(build.quota, .none)
        XCTAssertEqual(build.target, .none, "a failed end leaves the target ending (a new cleanup may be queued)")
    }

    // MARK: retry

    func testRetryUsesThePolicyWithRetryAfterFloor() {
        let r = decide(facts(.update, attempts: 3), .provider(.retry(after: nil)), random: 0.5)
        XCTAssertEqual(r, DispatchDecision(operation: .requeue(delaySeconds: 2, reason: "provider_retry"), quota: .none))  // 0.5 × 4
        let floor = decide(facts(.update, attempts: 1), .provider(.retry(after: 30)), random: 0.5)
        XCTAssertEqual(floor.operation, .requeue(delaySeconds: 30, reason: "provider_retry"))
        let np = decide(facts(.start, alert: true, attempts: 2), .notProcessed("GOAWAY"), random: 0.25)
        XCTAssertEqual(np.operation, .requeue(delaySeconds: 0.5, reason: "not_processed"), "not processed: every kind is resent")
        let refresh = decide(facts(.update), .provider(.refreshCredentialAndRetryOnce))
        XCTAssertEqual(refresh.operation.status, .queued)
    }

    func testRetryPastExpiresAtExpires() {
        let f = facts(.update, expiresAt: now.addingTimeInterval(10))
        XCTAssertEqual(decide(f, .provider(.retry(after: 10))).operation, .expired)
        XCTAssertEqual(decide(f, .provider(.retry(after: 10))).quota, .release)
        XCTAssertEqual(decide(f, .provider(.retry(after: 9))).operation.status, .queued)
        let past = facts(.update, expiresAt: now.addingTimeInterval(-1))
        XCTAssertEqual(decide(past, .notProcessed("x")).operation, .expired)
        XCTAssertEqual(
            decide(past, .provider(.accepted(providerId: nil))).operation.status, .accepted,
            "a provider acceptance is recorded even if it arrives after expires_at")
    }

    // MARK: unknown outcome

    func testUnknownOutcomeTable() {
        for result in [DispatchAttemptResult.possiblyProcessed("conn lost"), .leaseExpired] {
            let start = decide(facts(.start, alert: true), result)
            XCTAssertEqual(start.operation.status, .unknown)
            XCTAssertEqual(start.target, .startUnknown)
            XCTAssertEqual(start.quota, .consume, "it may have been delivered")

            let alert = decide(facts(.update, alert: true), result)
            XCTAssertEqual(alert.operation.status, .unknown)
            XCTAssertEqual(alert.target, .none)

            let stateOnly = decide(facts(.update, attempts: 1), result, random: 0.5)
            XCTAssertEqual(stateOnly.operation, .requeue(delaySeconds: 0.5, reason: "outcome_unknown"))
            XCTAssertEqual(stateOnly.quota, .none)

            let statelessEnd = decide(facts(.end, state: false, quota: false), result)
            XCTAssertEqual(statelessEnd.operation.status, .queued)
            let finalStateEnd = decide(facts(.end, state: true), result)
            XCTAssertEqual(finalStateEnd.operation.status, .queued)
        }
        let noQuota = decide(facts(.update, alert: true, quota: false), .possiblyProcessed(""))
        XCTAssertEqual(noQuota.quota, .none)
        if case .unknown(let reason) = noQuota.operation { XCTAssertFalse(reason.isEmpty) } else { XCTFail() }
    }

    // MARK: expiry

    func testExpired() {
        XCTAssertEqual(decide(facts(.update), .expired), DispatchDecision(operation: .expired, quota: .release))
        XCTAssertEqual(
            decide(facts(.start, alert: true), .expired),
            DispatchDecision(operation: .expired, quota: .release, target: .creationFailed, cancelQueued: "creation_failed"))
        XCTAssertEqual(decide(facts(.end, state: false, quota: false), .expired).quota, .none)
    }

    func testEveryResultIsDecidedForEveryKindAndPlatform() {
        let results: [DispatchAttemptResult] = [
            .provider(.accepted(providerId: nil)), .provider(.tokenDead(providerStatus: 410, providerReason: nil)),
            .provider(.refreshCredentialAndRetryOnce), .provider(.reconnectAndRetryOnce),
            .provider(.failed(code: "PROVIDER_REJECTED", providerStatus: 400, providerReason: "BadTopic")), .provider(.retry(after: nil)),
            .notProcessed(""), .possiblyProcessed(""), .noCredentials(""), .leaseExpired, .expired, .notSendable(code: "X", message: "y")
        ]
        for kind in PushEvent.allCases {
            for platform in ["ios", "android"] {
                for alert in [false, true] {
                    for r in results {
                        let d = decide(facts(kind, state: kind != .end, alert: alert, platform: platform), r)
                        // Quota moves only on final transitions; a requeue keeps the reservation.
                        if d.operation.status == .queued { XCTAssertEqual(d.quota, .none) }
                        if d.isFinal && d.operation.status != .accepted && d.operation.status != .unknown { XCTAssertNotEqual(d.quota, .consume) }
                        // Start and alert operations are never resent after a possible delivery.
                        if case .possiblyProcessed = r, kind == .start || alert { XCTAssertEqual(d.operation.status, .unknown) }
                        if case .leaseExpired = r, kind == .start || alert { XCTAssertEqual(d.operation.status, .unknown) }
                        // Target transitions only for the kinds they belong to.
                        if d.target == .startAccepted || d.target == .startUnknown || d.target == .creationFailed { XCTAssertEqual(kind, .start) }
                    }
                }
            }
        }
    }
}
