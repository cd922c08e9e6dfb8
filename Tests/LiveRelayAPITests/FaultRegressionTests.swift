import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore

/// Regressions found by the fault-injection suite (deploy/faults, issue 9).
final class FaultRegressionTests: APITestCase {

    /// A remote start reaches the device, the sender ends the activity before the device has
    /// registered its update token: the end is queued (`ending`) and parked until a token
    /// exists. The registration must be accepted, or the end waits forever (the suite found
    /// hundreds of ends stuck `queued/token_pending` after the drain).
    func testEndingTargetTakesItsFirstUpdateToken() throws {
        let w = try LifecycleWorld.make(env)
        let t = w.start()
        let end = env.call(
            "POST", "/v1/remote-updates/live-activities/end",
            ["target_id": .string(t), "idempotency_key": .string(UUID().uuidString)], as: w.sender.credential)
        XCTAssertEqual(end.status, 202)
        XCTAssertEqual(end["target"]?["status"], "ending")
        let tok = env.call(
            "PUT", "/v1/installations/\(w.installationId)/targets/\(t)/push-token", ["token": "abcdef01"],
            as: w.installationCredential)
        XCTAssertEqual(tok.status, 200, String(decoding: tok.raw, as: UTF8.self))
        XCTAssertEqual(tok["status"], "ending", "the token does not make an ending target ready again")
        XCTAssertEqual(tok["token_status"], "registered")
        let stored = try env.db.tenant(w.tenant.id) { c in try TargetStore.get(c, tenantId: w.tenant.id, id: t) }
        XCTAssertEqual(stored?.status, .ending)
        // Once ended, a registration still never replaces anything.
        _ = env.call("POST", "/v1/installations/\(w.installationId)/targets/\(t)/ended", [:], as: w.installationCredential)
        let late = env.call(
            "PUT", "/v1/installations/\(w.installationId)/targets/\(t)/push-token", ["token": "abcdef02"],
            as: w.installationCredential)
        XCTAssertEqual(late.errorCode, "TARGET_ENDED")
    }
}
