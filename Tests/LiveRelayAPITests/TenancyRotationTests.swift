import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// docs/endpoints.md tenant admin: master-key rotation (create another key, revoke the old one now or
/// after a grace period, never the last one).
final class TenancyRotationTests: TenancyTestCase {
    func testMasterKeyRotationEndToEnd() throws {
        let t = try tenant()
        let created = call("POST", "/v1/master-keys", ["label": "rotation", "idempotency_key": ikey()], as: t.master)
        XCTAssertEqual(created.status, 201, created.text)
        let second = try XCTUnwrap(created["credential"]?.stringValue)
        let secondId = try XCTUnwrap(created["id"]?.stringValue)
        XCTAssertEqual(call("GET", "/v1/master-keys", as: second).status, 200, "the new key works")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: t.master).status, 200)  // cached before the revocation

        let revokeStarted = Date()
        let revoked = call("POST", "/v1/master-keys/\(t.masterId)/revoke", ["expires_in_seconds": 2], as: t.master)
        XCTAssertEqual(revoked.status, 200, revoked.text)
        XCTAssertEqual(revoked["status"]?.stringValue, "revoking")
        XCTAssertNotNil(revoked["expires_at"]?.stringValue)

        // During the grace period the old key keeps working (checked twice, the second time
        // after the NOTIFY of the revocation has certainly reached the cache).
        XCTAssertEqual(call("GET", "/v1/master-keys", as: t.master).status, 200)
        Thread.sleep(forTimeInterval: 0.8)
        let during = call("GET", "/v1/master-keys", as: t.master)
        XCTAssertLessThan(Date().timeIntervalSince(revokeStarted), 2, "the grace-period check ran too late to mean anything")
        XCTAssertEqual(during.status, 200, "the old key works during its grace period")

        // After it: 401, at once (the cache never outlives the key's own expiry).
        Thread.sleep(forTimeInterval: max(0, 2.3 - Date().timeIntervalSince(revokeStarted)))
        let after = call("GET", "/v1/master-keys", as: t.master)
        XCTAssertEqual(after.status, 401, after.text)
        XCTAssertEqual(after.errorCode, "UNAUTHENTICATED")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: second).status, 200, "the new key still works")

        // The new key is now the last one: it cannot be revoked.
        let last = call("POST", "/v1/master-keys/\(secondId)/revoke", [:], as: second)
        XCTAssertEqual(last.status, 409, last.text)
        XCTAssertEqual(last.errorCode, "LAST_MASTER_KEY")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: second).status, 200, "a refused revocation changes nothing")

        // Revoking an already revoked key is idempotent.
        let again = call("POST", "/v1/master-keys/\(t.masterId)/revoke", [:], as: second)
        XCTAssertEqual(again.status, 200, again.text)
        XCTAssertEqual(again["status"]?.stringValue, "revoked")
        XCTAssertEqual(again["expires_at"], revoked["expires_at"], "a repeated revocation keeps the original expiry")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: t.master).status, 401)

        let list = call("GET", "/v1/master-keys", as: second)
        let statuses = Dictionary(
            uniqueKeysWithValues: (list["data"]?.arrayValue ?? []).map {
                ($0["id"]?.stringValue ?? "", $0["status"]?.stringValue ?? "")
            })
        XCTAssertEqual(statuses, [t.masterId: "revoked", secondId: "active"])
        XCTAssertFalse(list.text.contains("lrm_"), "a list never shows a credential")
    }

    /// A key revoked with a long grace period (mid-rotation) that turns out to be leaked must
    /// be stoppable at once by revoking it again without a grace period.
    func testRevokingNowCutsShortARunningGracePeriod() throws {
        let t = try tenant()
        let created = call("POST", "/v1/master-keys", ["label": "new", "idempotency_key": ikey()], as: t.master)
        let second = try XCTUnwrap(created["credential"]?.stringValue)
        XCTAssertEqual(
            call("POST", "/v1/master-keys/\(t.masterId)/revoke", ["expires_in_seconds": 3600], as: t.master)["status"]?.stringValue,
            "revoking")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: t.master).status, 200, "grace period running")
        let now = call("POST", "/v1/master-keys/\(t.masterId)/revoke", [:], as: second)
        XCTAssertEqual(now.status, 200, now.text)
        XCTAssertEqual(now["status"]?.stringValue, "revoked")
        eventually("the revoked master key stops working", within: 1) { self.env.call("GET", "/v1/master-keys", as: t.master).status == 401 }
        // A later, longer grace period never extends the earlier expiry.
        let longer = call("POST", "/v1/master-keys/\(t.masterId)/revoke", ["expires_in_seconds": 3600], as: second)
        XCTAssertEqual(longer["status"]?.stringValue, "revoked")
        XCTAssertEqual(call("GET", "/v1/master-keys", as: t.master).status, 401)
    }
}
