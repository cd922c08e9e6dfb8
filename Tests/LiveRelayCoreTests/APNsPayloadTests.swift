import Foundation
import JSON
import XCTest
@testable import LiveRelayCore

/// docs/providers.md APNs body and headers, §7 4096-byte limit (bytes, not characters).
final class APNsPayloadTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_792_328_400.999)

    func text(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }

    func testGoldenStart() {
        let b = APNsPayload.bytes(
            event: .start, timestamp: t0,
            contentState: ["status": "Picked up", "progress": 0.5, "eta": 1_792_330_200],
            staleDate: Date(timeIntervalSince1970: 1_792_332_000.5), relevanceScore: 0.75,
            alert: PushAlert(title: "Order picked up", body: "Arriving in 12 min", sound: "chime.aiff"),
            start: .init(
                attributesType: "DeliveryAttributes", targetId: "tgt_01", templateVersion: "tv_abc",
                businessKey: "delivery:42"))
        XCTAssertEqual(
            text(b),
            #"{"aps":{"alert":{"body":"Arriving in 12 min","sound":"chime.aiff","title":"Order picked up"},"attributes":{"business_key":"delivery:42","target_id":"tgt_01","template_version":"tv_abc"},"attributes-type":"DeliveryAttributes","content-state":{"eta":1792330200,"progress":0.5,"status":"Picked up"},"event":"start","input-push-token":1,"relevance-score":0.75,"stale-date":1792332000,"timestamp":1792328400}}"#
        )
    }

    func testGoldenStartWithoutBusinessKeyOrSound() {
        let b = APNsPayload.bytes(
            event: .start, timestamp: t0, contentState: ["s": 1],
            alert: PushAlert(title: "T", body: "B"),
            start: .init(attributesType: "A", targetId: "tgt_1", templateVersion: "tv_1"))
        XCTAssertEqual(
            text(b),
            #"{"aps":{"alert":{"body":"B","title":"T"},"attributes":{"target_id":"tgt_1","template_version":"tv_1"},"attributes-type":"A","content-state":{"s":1},"event":"start","input-push-token":1,"timestamp":1792328400}}"#
        )
    }

    func testGoldenUpdateWithoutAlertHasNoAlertOrSound() {
        let b = APNsPayload.bytes(
            event: .update, timestamp: Date(timeIntervalSince1970: 1_792_328_460),
            contentState: ["status": "2 stops away", "progress": 0.75])
        XCTAssertEqual(text(b), #"{"aps":{"content-state":{"progress":0.75,"status":"2 stops away"},"event":"update","timestamp":1792328460}}"#)
        let aps = APNsPayload.build(event: .update, timestamp: t0, contentState: [:])["aps"]!
        XCTAssertNil(aps["alert"])
        XCTAssertNil(aps["sound"])
        XCTAssertNil(aps["attributes"])
        XCTAssertNil(aps["input-push-token"])
    }

    func testGoldenUpdateWithAlert() {
        let b = APNsPayload.bytes(
            event: .update, timestamp: t0, contentState: ["s": "x"],
            staleDate: Date(timeIntervalSince1970: 1_792_330_000), relevanceScore: 1,
            alert: PushAlert(title: "Courier changed", body: "Tunde is on the way"))
        XCTAssertEqual(
            text(b),
            #"{"aps":{"alert":{"body":"Tunde is on the way","title":"Courier changed"},"content-state":{"s":"x"},"event":"update","relevance-score":1,"stale-date":1792330000,"timestamp":1792328400}}"#
        )
    }

    func testGoldenEnd() {
        let b = APNsPayload.bytes(
            event: .end, timestamp: Date(timeIntervalSince1970: 1_792_328_520),
            contentState: ["status": "Delivered"],
            dismissalDate: Date(timeIntervalSince1970: 1_792_332_000.9))
        XCTAssertEqual(text(b), #"{"aps":{"content-state":{"status":"Delivered"},"dismissal-date":1792332000,"event":"end","timestamp":1792328520}}"#)
    }

    func testStartAttributesIgnoredForNonStartEvents() {
        let start = APNsPayload.StartAttributes(attributesType: "A", targetId: "tgt_1", templateVersion: "tv_1")
        for event in [PushEvent.update, .end] {
            let aps = APNsPayload.build(event: event, timestamp: t0, contentState: [:], start: start)["aps"]!
            XCTAssertNil(aps["attributes"]); XCTAssertNil(aps["attributes-type"]); XCTAssertNil(aps["input-push-token"])
        }
    }

    func testTimesAreFlooredWholeEpochSeconds() {
        let p = APNsPayload(
            event: .end, timestamp: t0, contentState: [:],
            staleDate: Date(timeIntervalSince1970: 1_792_330_000.999),
            dismissalDate: Date(timeIntervalSince1970: 1_792_332_000.001))
        let aps = p.json["aps"]!
        XCTAssertEqual(aps["timestamp"], .int(1_792_328_400))
        XCTAssertEqual(aps["stale-date"], .int(1_792_330_000))
        XCTAssertEqual(aps["dismissal-date"], .int(1_792_332_000))
        for key in ["timestamp", "stale-date", "dismissal-date"] {
            XCTAssertLessThan(aps[key]!.intValue!, 10_000_000_000, key)
        }
    }

    func testHeaders() {
        let h = APNsPayload.headers(
            topicBundleId: "com.example.droptrack", priority: 5,
            expiration: Date(timeIntervalSince1970: 1_792_332_000.7),
            apnsId: "123e4567-e89b-12d3-a456-4266554400a0")
        XCTAssertEqual(h.map(\.0), ["apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-id"])
        XCTAssertEqual(
            h.map(\.1),
            [
                "com.example.droptrack.push-type.liveactivity", "liveactivity", "5", "1792332000",
                "123e4567-e89b-12d3-a456-4266554400a0"
            ])
        XCTAssertFalse(h.contains { $0.0 == "authorization" })
    }

    // MARK: size limit

    /// An update whose body is exactly `total` bytes, padded inside content-state with `unit`
    /// repeated (plus ASCII to land exactly).
    func payload(totalBytes total: Int, unit: String) -> APNsPayload {
        padded(toBytes: total, unit: unit, measuredBy: { $0.bytes().count }) { APNsPayload(event: .update, timestamp: t0, contentState: $0) }
    }

    func testSizeBoundaryCountsBytesNotCharacters() throws {
        for unit in ["a", "é", "😀"] {
            let ok = payload(totalBytes: 4096, unit: unit)
            let okBytes = ok.bytes()
            XCTAssertEqual(okBytes.count, 4096, unit)
            XCTAssertNoThrow(try APNsPayload.checkSize(okBytes), unit)
            XCTAssertEqual(try ok.checkedBytes(), okBytes)

            let over = payload(totalBytes: 4097, unit: unit)
            XCTAssertEqual(over.bytes().count, 4097, unit)
            if unit != "a" {
                XCTAssertLessThan(over.json.jsonString.count, 4096, "fewer characters than bytes for \(unit)")
            }
            XCTAssertThrowsError(try APNsPayload.checkSize(over.bytes()), unit) { e in
                XCTAssertEqual(
                    e as? DomainError,
                    DomainError(
                        status: 413, code: "PAYLOAD_TOO_LARGE", message: (e as! DomainError).message,
                        details: ["bytes": 4097, "actual": 4097, "limit": 4096, "provider": "apns"]))
            }
            XCTAssertThrowsError(try over.checkedBytes())
        }
        XCTAssertEqual(APNsPayload.maxBytes, 4096)
    }
}

/// A string of exactly `bytes` UTF-8 bytes: as many `unit`s as fit, then ASCII "a"s.
func payloadPadding(bytes: Int, unit: String) -> String {
    let u = unit.utf8.count
    let n = bytes / u
    let s = String(repeating: unit, count: n) + String(repeating: "a", count: bytes - n * u)
    precondition(s.utf8.count == bytes)
    return s
}

/// What `make` builds around the state `{"pad": s}` with `s` chosen (`payloadPadding`, `unit`
/// repeated) so that `measure` of it is exactly `total` bytes: `s` holds only characters JSON
/// does not escape, so each byte of `s` is one more measured byte.
func padded<T>(toBytes total: Int, unit: String, measuredBy measure: (T) -> Int, _ make: (JSONValue) -> T) -> T {
    let base = measure(make(["pad": ""]))
    return make(["pad": .string(payloadPadding(bytes: total - base, unit: unit))])
}
