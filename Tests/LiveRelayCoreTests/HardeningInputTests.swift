import Foundation
import JSON
import LiveRelayCore
import XCTest

/// Pure input bounds of issue 14 (docs/security.md "Input bounds", "Provider credentials").
final class HardeningInputTests: XCTestCase {
    func read(_ value: String) throws -> Date? {
        var r = try RequestReader(["at": .string(value)])
        return try r.optionalTimestamp("at")
    }

    func testTimestampsOutsideNineteenSeventyToNineNineNineNineAreRefusedNamingTheField() throws {
        XCTAssertEqual(try read("1970-01-01T00:00:00Z")?.timeIntervalSince1970, 0)
        XCTAssertEqual(try read("9999-12-31T23:59:59.999Z")?.timeIntervalSince1970 ?? 0, 253_402_300_799.999, accuracy: 0.0001)
        XCTAssertNotNil(try read("1970-01-01T01:00:00+01:00"), "1970-01-01T00:00:00Z after the offset")
        for bad in [
            "1969-12-31T23:59:59.999Z", "0000-01-01T00:00:00Z", "1970-01-01T00:59:59+01:00", "9999-12-31T23:59:59-00:01",
            "9999-12-31T23:30:00-01:00"
        ] {
            XCTAssertThrowsError(try read(bad), bad) { e in
                XCTAssertEqual((e as? DomainError)?.code, "INVALID_REQUEST")
                XCTAssertEqual((e as? DomainError)?.details["field"], "at")
            }
        }
    }

    func testAPNsTokensAreEvenLengthHex() {
        for good in ["ab", "AB01", String(repeating: "f", count: 64), String(repeating: "0", count: 512)] {
            XCTAssertTrue(APNsToken.isValid(good), good)
        }
        for bad in ["", "a", "abc", "zz", "a-b_", "ab cd", "ab\n", String(repeating: "0", count: 514), "ａｂ"] {
            XCTAssertFalse(APNsToken.isValid(bad), bad)
        }
        XCTAssertThrowsError(try APNsToken.check("abc")) { XCTAssertEqual(($0 as? DomainError)?.details["field"], "token") }
    }

    func testTokenURIPolicy() {
        let fcm = "https://fcm.googleapis.com"
        XCTAssertTrue(TokenURIPolicy.allows("https://oauth2.googleapis.com/token", fcmURL: fcm))
        XCTAssertTrue(TokenURIPolicy.allows("https://fcm.googleapis.com/any/path", fcmURL: fcm))
        XCTAssertTrue(TokenURIPolicy.allows("https://FCM.googleapis.com:443/t", fcmURL: fcm))
        for bad in [
            "https://oauth2.googleapis.com/token2", "https://oauth2.googleapis.com:8443/token", "http://oauth2.googleapis.com/token",
            "https://evil.example/token", "https://fcm.googleapis.com.evil.example/t", "https://a@fcm.googleapis.com/t",
            "https://fcm.googleapis.com:444/t", "https://fcm.googleapis.com/t#x", "not a url"
        ] {
            XCTAssertFalse(TokenURIPolicy.allows(bad, fcmURL: fcm), bad)
        }
        XCTAssertTrue(TokenURIPolicy.allows("https://127.0.0.1:8443/token", fcmURL: "https://127.0.0.1:8443"))
        XCTAssertFalse(TokenURIPolicy.allows("https://127.0.0.1:8444/token", fcmURL: "https://127.0.0.1:8443"))
    }

    func testCapErrorsFollowTheLimitConventions() {
        let e = TenantLimits.exceeded(.liveTargets, limit: 5, actual: 5)
        XCTAssertEqual(e.status, 409)
        XCTAssertEqual(e.code, "TARGET_LIMIT")
        XCTAssertEqual(e.details["limit"], 5)
        XCTAssertEqual(e.details["actual"], 5)
        XCTAssertEqual(TenantLimits.exceeded(.installations, limit: 1, actual: 1).code, "INSTALLATION_LIMIT")
    }
}
