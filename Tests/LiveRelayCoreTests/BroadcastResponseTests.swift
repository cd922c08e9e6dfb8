import Foundation
import XCTest
import LiveRelayCore

/// `ProviderOutcome.apnsBroadcast` (docs/channels.md "APNs wire"), table-driven, no I/O.
final class BroadcastResponseTests: XCTestCase {
    typealias O = ProviderOutcome

    func body(_ reason: String) -> [UInt8] { Array(#"{"reason":"\#(reason)"}"#.utf8) }

    func testBroadcastTable() {
        let cases: [(Int, String?, String?, O)] = [
            (200, nil, nil, .accepted(providerId: "u-1")),
            (400, "ChannelNotRegistered", nil, .tokenDead(providerStatus: 400, providerReason: "ChannelNotRegistered")),
            (400, "BadChannelId", nil, .tokenDead(providerStatus: 400, providerReason: "BadChannelId")),
            (404, "ChannelNotRegistered", nil, .tokenDead(providerStatus: 404, providerReason: "ChannelNotRegistered")),
            (410, "ChannelNotRegistered", nil, .tokenDead(providerStatus: 410, providerReason: "ChannelNotRegistered")),
            (400, "MissingChannelId", nil, .failed(code: O.Code.rejected, providerStatus: 400, providerReason: "MissingChannelId")),
            (400, "BadExpirationDate", nil, .failed(code: O.Code.rejected, providerStatus: 400, providerReason: "BadExpirationDate")),
            (400, "FeatureNotEnabled", nil, .failed(code: O.Code.rejected, providerStatus: 400, providerReason: "FeatureNotEnabled")),
            (400, "BadDeviceToken", nil, .failed(code: O.Code.rejected, providerStatus: 400, providerReason: "BadDeviceToken")),
            (404, "BadPath", nil, .failed(code: O.Code.rejected, providerStatus: 404, providerReason: "BadPath")),
            (410, "Unregistered", nil, .failed(code: O.Code.rejected, providerStatus: 410, providerReason: "Unregistered")),
            (403, "ExpiredProviderToken", nil, .refreshCredentialAndRetryOnce),
            (403, "UnrelatedKeyIdInToken", nil, .reconnectAndRetryOnce),
            (403, "InvalidProviderToken", nil, .failed(code: O.Code.credentialsInvalid, providerStatus: 403, providerReason: "InvalidProviderToken")),
            (413, "PayloadTooLarge", nil, .failed(code: O.Code.payloadTooLarge, providerStatus: 413, providerReason: "PayloadTooLarge")),
            (429, "TooManyRequests", "9", .retry(after: 9)),
            (500, "InternalServerError", nil, .retry(after: nil)),
            (503, "ServiceUnavailable", nil, .retry(after: nil)),
            (405, "MethodNotAllowed", nil, .failed(code: O.Code.rejected, providerStatus: 405, providerReason: "MethodNotAllowed"))
        ]
        for (status, reason, retryAfter, expected) in cases {
            let got = O.apnsBroadcast(status: status, body: reason.map(body) ?? [], providerId: "u-1", retryAfterHeader: retryAfter)
            XCTAssertEqual(got, expected, "\(status) \(reason ?? "")")
        }
        XCTAssertTrue(O.isChannelInvalid(status: 400, reason: "BadChannelId"))
        XCTAssertFalse(O.isChannelInvalid(status: 403, reason: "ChannelNotRegistered"))
        XCTAssertFalse(O.isChannelInvalid(status: 400, reason: nil))
    }

    func testRetryAfterRefreshIsFinal() {
        XCTAssertEqual(
            O.apnsBroadcast(status: 403, body: body("ExpiredProviderToken"), isRetryAfterRefresh: true),
            .failed(code: O.Code.credentialsInvalid, providerStatus: 403, providerReason: "ExpiredProviderToken"))
        XCTAssertEqual(
            O.apnsBroadcast(status: 403, body: body("UnrelatedKeyIdInToken"), isRetryAfterRefresh: true),
            .failed(code: O.Code.credentialsInvalid, providerStatus: 403, providerReason: "UnrelatedKeyIdInToken"))
        XCTAssertEqual(
            O.apnsBroadcast(status: 400, body: Array("not json".utf8)), .failed(code: O.Code.rejected, providerStatus: 400, providerReason: nil))
    }
}
