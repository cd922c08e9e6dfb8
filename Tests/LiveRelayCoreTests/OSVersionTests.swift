import XCTest
import LiveRelayCore

/// `OSVersion` (docs/endpoints.md "Installation attributes"): parsing bounds and numeric order.
final class OSVersionTests: XCTestCase {
    func testParsesOneToThreeNumericParts() {
        XCTAssertEqual(OSVersion.parse("18")?.parts, [18])
        XCTAssertEqual(OSVersion.parse("18.2")?.parts, [18, 2])
        XCTAssertEqual(OSVersion.parse("17.5.1")?.parts, [17, 5, 1])
        XCTAssertEqual(OSVersion.parse("9999.9999.9999")?.description, "9999.9999.9999", "14 characters, the longest")
        XCTAssertEqual(OSVersion.parse("018.02")?.description, "18.2")
        for bad in ["", ".", "18.", ".18", "18..2", "1.2.3.4", "10000", "18.2a", "-1", "+18", "18 ", " 18", "١٨", "18.2.1.0"] {
            XCTAssertNil(OSVersion.parse(bad), bad)
        }
    }

    func testThrowsNamingTheField() {
        XCTAssertThrowsError(try OSVersion.parse("x", field: "os_version")) { e in
            XCTAssertEqual((e as? DomainError)?.details["field"], "os_version")
            XCTAssertEqual((e as? DomainError)?.status, 400)
        }
    }

    func testComparesNumerically() throws {
        let v = { (s: String) in OSVersion.parse(s)! }
        XCTAssertTrue(v("18.10") > v("18.9"))
        XCTAssertTrue(v("18.0") >= OSVersion(major: 18))
        XCTAssertEqual(v("18"), v("18.0.0"))
        XCTAssertEqual(Set([v("18"), v("18.0")]).count, 1)
        XCTAssertTrue(v("17.9.9") < OSVersion(major: 18))
        XCTAssertFalse(v("18.0") < v("18"))
        XCTAssertEqual(OSVersion(major: 18, minor: 2).description, "18.2")
    }
}
