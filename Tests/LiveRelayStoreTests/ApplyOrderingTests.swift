import Foundation
import XCTest
import LiveRelayCore
import LiveRelayStore

/// `DispatchStore.reachesBeyondTarget` (docs/delivery.md "Applying results"): which results
/// make their batch wait for the dispatcher's `effectsLock` (effects on rows no single target
/// of the batch owns) and which run beside other batches. Pure: no I/O.
final class ApplyOrderingTests: XCTestCase {
    let accepted = DispatchDecision.OperationChange.accepted(providerId: "apns-1")
    let failure = DispatchDecision.Failure(code: "TOKEN_INVALID", message: "dead token")

    func testEffectsOnTheOwnTargetRunConcurrently() {
        let plain = DispatchDecision(operation: accepted, quota: .consume)
        XCTAssertFalse(DispatchStore.reachesBeyondTarget(channelId: nil, plain))
        XCTAssertFalse(DispatchStore.reachesBeyondTarget(channelId: "chn_1", plain), "no target change: counts stay")
        let start = DispatchDecision(operation: accepted, quota: .consume, target: .startAccepted)
        XCTAssertTrue(DispatchStore.hasEffects(start))
        XCTAssertFalse(DispatchStore.reachesBeyondTarget(channelId: nil, start), "an accepted start only moves its own target")
        let ended = DispatchDecision(
            operation: .failed(failure), quota: .release, target: .ended(reason: "token_invalid"), cancelQueued: "token_invalid",
            deadToken: .endTarget(endReason: "token_invalid"))
        XCTAssertFalse(DispatchStore.reachesBeyondTarget(channelId: nil, ended), "its own target and that target's queue")
    }

    func testSharedRowsAreAppliedOneBatchAtATime() {
        let start = DispatchDecision(operation: accepted, quota: .consume, target: .startAccepted)
        XCTAssertTrue(DispatchStore.reachesBeyondTarget(channelId: "chn_1", start), "a channel member's status moves the channel's counts")
        let pts = DispatchDecision(operation: .failed(failure), quota: .release, target: .creationFailed, deadToken: .startTargetPending)
        XCTAssertTrue(DispatchStore.reachesBeyondTarget(channelId: nil, pts), "the start target is shared by its targets")
        let fcm = DispatchDecision(operation: .failed(failure), quota: .release, deadToken: .clearInstallationFCMToken)
        XCTAssertTrue(DispatchStore.reachesBeyondTarget(channelId: nil, fcm), "the installation and all its targets")
    }
}
