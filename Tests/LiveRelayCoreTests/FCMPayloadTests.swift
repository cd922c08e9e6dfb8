import Foundation
import JSON
import XCTest
@testable import LiveRelayCore

/// docs/providers.md FCM data message, §7 4096-byte `data` limit.
final class FCMPayloadTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_792_328_400.999)

    func message(
        state: JSONValue = ["status": "Picked up", "progress": 0.5], alert: PushAlert? = nil,
        staleAt: Date? = nil, dismissAt: Date? = nil, event: PushEvent = .update
    ) -> FCMMessage {
        FCMMessage(
            token: "fcm-token-1", targetId: "tgt_01", event: event, revision: 7, timestamp: t0, state: state,
            templateVersion: "tv_abc", alert: alert, staleAt: staleAt, dismissAt: dismissAt, ttlSeconds: 3600)
    }

    func testGoldenMessage() {
        let m = message(
            alert: PushAlert(title: "Courier changed", body: "Tunde", sound: "chime.aiff"),
            staleAt: Date(timeIntervalSince1970: 1_792_332_000.5))
        XCTAssertEqual(
            String(decoding: m.bytes(), as: UTF8.self),
            #"{"message":{"android":{"priority":"HIGH","ttl":"3600s"},"data":{"alert_body":"Tunde","alert_title":"Courier changed","event":"update","revision":"7","stale_at":"1792332000","state":"{\"progress\":0.5,\"status\":\"Picked up\"}","target_id":"tgt_01","template_version":"tv_abc","timestamp":"1792328400"},"token":"fcm-token-1"}}"#
        )
    }

    func testGoldenEndMinimal() {
        let m = message(state: ["status": "Delivered"], dismissAt: Date(timeIntervalSince1970: 1_792_330_000), event: .end)
        XCTAssertEqual(
            String(decoding: m.dataBytes(), as: UTF8.self),
            #"{"dismiss_at":"1792330000","event":"end","revision":"7","state":"{\"status\":\"Delivered\"}","target_id":"tgt_01","template_version":"tv_abc","timestamp":"1792328400"}"#
        )
    }

    func testAllDataValuesAreStringsAndStateIsJSONText() throws {
        let state: JSONValue = ["n": 1, "b": true, "nested": ["x": [1, 2.5, "é😀"]], "z": nil]
        let m = message(
            state: state, alert: PushAlert(title: "t", body: "b"),
            staleAt: t0, dismissAt: t0, event: .start)
        let body = try JSONValue.parse(m.bytes())
        let data = try XCTUnwrap(body["message"]?["data"]?.objectValue)
        XCTAssertEqual(
            Set(data.keys),
            [
                "target_id", "event", "revision", "timestamp", "state", "template_version",
                "alert_title", "alert_body", "stale_at", "dismiss_at"
            ])
        for (k, v) in data { XCTAssertNotNil(v.stringValue, "\(k) must be a string") }
        XCTAssertEqual(try JSONValue.parse(try XCTUnwrap(data["state"]?.stringValue)), state)
        XCTAssertEqual(data["timestamp"], "1792328400")
        XCTAssertEqual(data["event"], "start")
        XCTAssertEqual(body["message"]?["android"], ["priority": "HIGH", "ttl": "3600s"])
        XCTAssertNil(body["message"]?["notification"])
    }

    func testOptionalKeysAbsentWhenNotGiven() {
        let d = message().data
        for k in ["alert_title", "alert_body", "stale_at", "dismiss_at"] { XCTAssertNil(d[k], k) }
    }

    func testTTL() {
        let now = Date(timeIntervalSince1970: 1_000)
        XCTAssertEqual(FCMMessage.ttlSeconds(expiration: Date(timeIntervalSince1970: 4_600.9), now: now), 3600)
        XCTAssertEqual(FCMMessage.ttlSeconds(expiration: Date(timeIntervalSince1970: 500), now: now), 0)
        XCTAssertEqual(FCMMessage.ttlSeconds(expiration: Date(timeIntervalSince1970: 1e9), now: now), 2_419_200)
        var m = message()
        m.ttlSeconds = 0
        XCTAssertEqual(m.json["message"]?["android"]?["ttl"], "0s")
    }

    func message(dataBytes total: Int, unit: String) -> FCMMessage {
        padded(toBytes: total, unit: unit, measuredBy: { $0.dataBytes().count }) { message(state: $0) }
    }

    func testDataSizeBoundaryCountsBytesNotCharacters() throws {
        for unit in ["a", "é", "😀"] {
            let ok = message(dataBytes: 4096, unit: unit)
            XCTAssertEqual(ok.dataBytes().count, 4096, unit)
            XCTAssertNoThrow(try FCMMessage.checkDataSize(ok.dataBytes()), unit)
            XCTAssertEqual(try ok.checkedBytes(), ok.bytes())
            XCTAssertGreaterThan(ok.bytes().count, 4096, "the limit is on data, not the whole body")

            let over = message(dataBytes: 4097, unit: unit)
            XCTAssertEqual(over.dataBytes().count, 4097, unit)
            if unit != "a" { XCTAssertLessThan(over.dataJSON.jsonString.count, 4096) }
            XCTAssertThrowsError(try over.checkedBytes(), unit) { e in
                let d = e as? DomainError
                XCTAssertEqual(d?.status, 413)
                XCTAssertEqual(d?.code, "PAYLOAD_TOO_LARGE")
                XCTAssertEqual(d?.details, ["bytes": 4097, "actual": 4097, "limit": 4096, "provider": "fcm"])
            }
        }
        XCTAssertEqual(FCMMessage.maxDataBytes, 4096)
    }

    func testEscapedStateCountsEscapes() {
        // A quote in the state becomes \" inside the JSON text and \\\" inside the data string.
        let m = message(state: ["q": "\""])
        XCTAssertEqual(m.data["state"], #"{"q":"\""}"#)
        XCTAssertTrue(m.dataJSON.jsonString.contains(#""state":"{\"q\":\"\\\"\"}""#))
    }
}
