import XCTest
@testable import LiveRelayCore

/// docs/http-conventions.md time formats.
final class TimestampTests: XCTestCase {
    func testFormatIsUTCWithMilliseconds() {
        XCTAssertEqual(Timestamp.format(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamp.format(Date(timeIntervalSince1970: 1_792_328_400.1239)), "2026-10-18T13:00:00.123Z")
        XCTAssertEqual(Timestamp.format(Date(timeIntervalSince1970: 951_782_400)), "2000-02-29T00:00:00.000Z")
    }

    func testParseNormalisesOffsets() {
        XCTAssertEqual(Timestamp.parse("2026-10-18T13:00:00Z")?.timeIntervalSince1970, 1_792_328_400)
        XCTAssertEqual(Timestamp.parse("2026-10-18T15:30:00+02:30")?.timeIntervalSince1970, 1_792_328_400)
        XCTAssertEqual(Timestamp.parse("2026-10-18t12:00:00-01:00")?.timeIntervalSince1970, 1_792_328_400)
        XCTAssertEqual(Timestamp.parse("2026-10-18T13:00:00.5Z")?.timeIntervalSince1970, 1_792_328_400.5)
        XCTAssertEqual(Timestamp.format(Timestamp.parse("2026-10-18T13:00:00.123456Z")!), "2026-10-18T13:00:00.123Z")
    }

    func testParseRejectsNonRFC3339() {
        for bad in [
            "2026-10-18", "2026-10-18 13:00:00Z", "2026-10-18T13:00:00", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z",
            "2026-10-18T24:00:00Z", "2026-10-18T13:00:00.Z", "2026-10-18T13:00:00+0200", "1792328400", "", "2026-10-18T13:00:00Zjunk"
        ] {
            XCTAssertNil(Timestamp.parse(bad), bad)
        }
    }

    func testEpochSecondsFloors() {
        XCTAssertEqual(Timestamp.epochSeconds(Date(timeIntervalSince1970: 1_792_328_400.999)), 1_792_328_400)
    }
}
