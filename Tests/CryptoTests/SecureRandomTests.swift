import Foundation
import Crypto
import XCTest

/// `SecureRandom.uuidV4`: the lowercase RFC 9562 version-4 form APNs takes as `apns-id`.
final class SecureRandomTests: XCTestCase {
    func testUUIDv4HasTheVersionVariantAndLowercaseForm() {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = SecureRandom.uuidV4()
            XCTAssertEqual(id.count, 36)
            XCTAssertNotNil(id.range(of: "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", options: .regularExpression), id)
            XCTAssertEqual(UUID(uuidString: id)?.uuidString.lowercased(), id, "Foundation reads it back as the same UUID")
            seen.insert(id)
        }
        XCTAssertEqual(seen.count, 1000)
    }
}
