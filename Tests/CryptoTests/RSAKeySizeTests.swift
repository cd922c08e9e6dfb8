import Crypto
import XCTest

/// RSA private keys are accepted from 2048 to 4096 bits (docs/security.md "Provider
/// credentials"): a larger uploaded key would only make every RS256 signature slower.
final class RSAKeySizeTests: XCTestCase {
    func testModulusAboveFourThousandNinetySixBitsIsRefused() throws {
        XCTAssertEqual(try RSAPrivateKey(pem: RSAPrivateKey.generate(bits: 4096).pkcs8PEM).bits, 4096, "4096 bits: the largest accepted")
        XCTAssertThrowsError(try RSAPrivateKey(pem: RSAPrivateKey.generate(bits: 4104).pkcs8PEM)) { e in
            XCTAssertTrue("\(e)".contains("4096"), "\(e)")
        }
        XCTAssertEqual(try RSAPrivateKey(pem: RSAPrivateKey.generate(bits: 2048).pkcs8PEM).bits, 2048)
    }
}
