import Foundation
import JSON
import XCTest
@testable import LiveRelayCore

/// docs/providers.md "Responses", table-driven for APNs and FCM.
final class ProviderResponseTests: XCTestCase {
    typealias O = ProviderOutcome
    let creds = O.Code.credentialsInvalid, rejected = O.Code.rejected

    func apnsBody(_ reason: String) -> [UInt8] { Array(#"{"reason":"\#(reason)"}"#.utf8) }

    func testAPNsTable() {
        // 403 with any reason but the two retried ones: the credential is refused.
        let credentialReasons: [String?] = [
            "InvalidProviderToken", "MissingProviderToken", "BadCertificate", "BadCertificateEnvironment", "BadEnvironmentKeyInToken",
            "Forbidden", nil
        ]
        // Other 4xx: the request is refused.
        let rejectedReasons = [
            (400, "BadTopic"), (400, "TopicDisallowed"), (400, "BadPriority"), (400, "BadExpirationDate"), (400, "DeviceTokenNotForTopic"),
            (400, "InvalidPushType"), (404, "BadPath"), (405, "MethodNotAllowed")
        ]
        var rows: [(Int, String?, String?, O, UInt)] = [
            (200, nil, nil, .accepted(providerId: "A-1"), #line),
            (410, "Unregistered", nil, .tokenDead(providerStatus: 410, providerReason: "Unregistered"), #line),
            (410, "ExpiredToken", nil, .tokenDead(providerStatus: 410, providerReason: "ExpiredToken"), #line),
            (410, nil, nil, .tokenDead(providerStatus: 410, providerReason: nil), #line),
            (400, "BadDeviceToken", nil, .tokenDead(providerStatus: 400, providerReason: "BadDeviceToken"), #line),
            (403, "ExpiredProviderToken", nil, .refreshCredentialAndRetryOnce, #line),
            (403, "UnrelatedKeyIdInToken", nil, .reconnectAndRetryOnce, #line),
            (413, "PayloadTooLarge", nil, .failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: "PayloadTooLarge"), #line),
            (400, "IdleTimeout", nil, .retry(after: nil), #line),
            (429, "TooManyRequests", nil, .retry(after: nil), #line),
            (429, "TooManyProviderTokenUpdates", "30", .retry(after: 30), #line),
            (500, "InternalServerError", nil, .retry(after: nil), #line),
            (503, "ServiceUnavailable", "5", .retry(after: 5), #line),
            (503, "Shutdown", nil, .retry(after: nil), #line),
            (502, nil, nil, .retry(after: nil), #line)
        ]
        rows += credentialReasons.map { (403, $0, nil, .failed(code: creds, providerStatus: 403, providerReason: $0), #line) }
        rows += rejectedReasons.map { (status, reason) in
            (status, reason, nil, .failed(code: rejected, providerStatus: status, providerReason: reason), #line)
        }
        for (status, reason, retryAfter, expected, line) in rows {
            let body = reason.map(apnsBody) ?? []
            XCTAssertEqual(
                O.apns(status: status, body: body, apnsId: "A-1", retryAfterHeader: retryAfter), expected,
                "\(status) \(reason ?? "-")", line: line)
        }
    }

    func testAPNsRetryOnceNeverLoops() {
        for reason in ["ExpiredProviderToken", "UnrelatedKeyIdInToken"] {
            XCTAssertEqual(
                O.apns(status: 403, body: apnsBody(reason), isRetryAfterRefresh: true),
                .failed(code: creds, providerStatus: 403, providerReason: reason))
        }
        XCTAssertEqual(O.apns(status: 200, body: [], apnsId: "x", isRetryAfterRefresh: true), .accepted(providerId: "x"))
    }

    func testAPNsMalformedBodies() {
        XCTAssertNil(O.apnsReason(Array("not json".utf8)))
        XCTAssertNil(O.apnsReason(Array("[1]".utf8)))
        XCTAssertEqual(O.apnsReason(Array(#"{"reason":"Unregistered","timestamp":1792328400000}"#.utf8)), "Unregistered")
        XCTAssertEqual(
            O.apns(status: 400, body: Array("<html>".utf8)),
            .failed(code: rejected, providerStatus: 400, providerReason: nil))
    }

    func fcmBody(status: String?, code: Int = 0, errorCode: String? = nil) -> [UInt8] {
        var err: [String: JSONValue] = ["code": .int(Int64(code)), "message": "m"]
        if let status { err["status"] = .string(status) }
        if let errorCode {
            err["details"] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(errorCode)]]
        }
        return JSONValue.object(["error": .object(err)]).serialized()
    }

    func testFCMTable() {
        let rows: [(Int, String?, String?, String?, O, UInt)] = [
            (404, "NOT_FOUND", "UNREGISTERED", nil, .tokenDead(providerStatus: 404, providerReason: "UNREGISTERED"), #line),
            (404, "UNREGISTERED", nil, nil, .tokenDead(providerStatus: 404, providerReason: "UNREGISTERED"), #line),
            (400, "INVALID_ARGUMENT", "UNREGISTERED", nil, .tokenDead(providerStatus: 400, providerReason: "UNREGISTERED"), #line),
            (404, "NOT_FOUND", nil, nil, .failed(code: rejected, providerStatus: 404, providerReason: "NOT_FOUND"), #line),
            (
                400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", nil, .failed(code: rejected, providerStatus: 400, providerReason: "INVALID_ARGUMENT"),
                #line
            ),
            (400, "INVALID_ARGUMENT", nil, nil, .failed(code: rejected, providerStatus: 400, providerReason: "INVALID_ARGUMENT"), #line),
            (401, "UNAUTHENTICATED", nil, nil, .refreshCredentialAndRetryOnce, #line),
            (401, nil, nil, nil, .refreshCredentialAndRetryOnce, #line),
            (
                401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", nil,
                .failed(code: creds, providerStatus: 401, providerReason: "THIRD_PARTY_AUTH_ERROR"), #line
            ),
            (
                403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", nil, .failed(code: creds, providerStatus: 403, providerReason: "SENDER_ID_MISMATCH"),
                #line
            ),
            (403, "PERMISSION_DENIED", nil, nil, .failed(code: creds, providerStatus: 403, providerReason: "PERMISSION_DENIED"), #line),
            (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "60", .retry(after: 60), #line),
            (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", nil, .retry(after: nil), #line),
            (429, nil, nil, "Wed, 21 Oct 2026 07:28:00 GMT", .retry(after: nil), #line),
            (500, "INTERNAL", "INTERNAL", nil, .retry(after: nil), #line),
            (503, "UNAVAILABLE", "UNAVAILABLE", "10", .retry(after: 10), #line),
            (502, nil, nil, nil, .retry(after: nil), #line),
            (413, nil, nil, nil, .failed(code: "PAYLOAD_TOO_LARGE", providerStatus: 413, providerReason: nil), #line)
        ]
        for (status, rpc, errorCode, retryAfter, expected, line) in rows {
            let body = fcmBody(status: rpc, code: status, errorCode: errorCode)
            XCTAssertEqual(
                O.fcm(status: status, body: body, retryAfterHeader: retryAfter), expected,
                "\(status) \(rpc ?? "-") \(errorCode ?? "-")", line: line)
        }
    }

    func testFCMAcceptedAndRetryOnce() {
        let ok = Array(#"{"name":"projects/p/messages/0:1500415314455276%31bd1c9631bd1c96"}"#.utf8)
        XCTAssertEqual(O.fcm(status: 200, body: ok), .accepted(providerId: "projects/p/messages/0:1500415314455276%31bd1c9631bd1c96"))
        XCTAssertEqual(O.fcm(status: 200, body: []), .accepted(providerId: nil))
        XCTAssertEqual(
            O.fcm(status: 401, body: fcmBody(status: "UNAUTHENTICATED"), isRetryAfterRefresh: true),
            .failed(code: creds, providerStatus: 401, providerReason: "UNAUTHENTICATED"))
        XCTAssertEqual(O.fcm(status: 500, body: Array("oops".utf8)), .retry(after: nil))
    }

    func testFCMErrorBodyParsing() {
        XCTAssertEqual(
            FCMErrorBody(body: fcmBody(status: "NOT_FOUND", errorCode: "UNREGISTERED")),
            FCMErrorBody(status: "NOT_FOUND", errorCode: "UNREGISTERED"))
        XCTAssertEqual(FCMErrorBody(body: Array("{}".utf8)), FCMErrorBody(status: nil, errorCode: nil))
        XCTAssertEqual(FCMErrorBody(body: []), FCMErrorBody(status: nil, errorCode: nil))
    }

    func testRetryAfterParsing() {
        XCTAssertEqual(O.retryAfterSeconds("120"), 120)
        XCTAssertEqual(O.retryAfterSeconds(" 0 "), 0)
        for bad in [nil, "", "-1", "1.5", "abc", "Wed, 21 Oct 2026 07:28:00 GMT", "99999999999"] {
            XCTAssertNil(O.retryAfterSeconds(bad), bad ?? "nil")
        }
    }

    func testDeadTokenEffectsAndFinality() {
        XCTAssertEqual(O.deadTokenEffect(.activityUpdate), .endTarget(endReason: "token_invalid"))
        XCTAssertEqual(O.deadTokenEffect(.pushToStart), .startTargetPending)
        XCTAssertEqual(O.deadTokenEffect(.fcmInstallation), .clearInstallationFCMToken)
        XCTAssertTrue(O.accepted(providerId: nil).isFinal)
        XCTAssertTrue(O.tokenDead(providerStatus: 410, providerReason: nil).isFinal)
        XCTAssertFalse(O.retry(after: nil).isFinal)
        XCTAssertFalse(O.refreshCredentialAndRetryOnce.isFinal)
    }
}
