import Crypto
import XCTest

final class AESGCMTests: XCTestCase {
    let key = SecureRandom.bytes(32)

    func testRoundTripLayoutAndRandomNonce() throws {
        let box = try AESGCM(key: key)
        let plaintext = Array("-----BEGIN PRIVATE KEY----- apns .p8".utf8)
        let sealed = try box.seal(plaintext, associatedData: Array("credential:42".utf8))
        XCTAssertEqual(sealed.count, plaintext.count + 29)
        XCTAssertEqual(sealed[0], 0x01)
        XCTAssertEqual(try box.open(sealed, associatedData: Array("credential:42".utf8)), plaintext)
        XCTAssertNotEqual(try box.seal(plaintext), try box.seal(plaintext))
        XCTAssertEqual(try box.open(try box.seal([])), [])
        let large = SecureRandom.bytes(1 << 20)
        XCTAssertEqual(try box.open(try box.seal(large)), large)
        XCTAssertFalse(String(describing: box).contains(hex(key)))
    }

    func testTamperingEachRegionFails() throws {
        let box = try AESGCM(key: key)
        let sealed = try box.seal(Array("secret value".utf8))
        // version byte, first/last nonce byte, first/last ciphertext byte, first/last tag byte
        for index in [0, 1, 12, 13, sealed.count - 17, sealed.count - 16, sealed.count - 1] {
            var tampered = sealed
            tampered[index] ^= 0x01
            XCTAssertThrowsError(try box.open(tampered), "byte \(index)") { XCTAssertTrue($0 is CryptoError) }
        }
        for length in [0, 1, 28, sealed.count - 1] {
            XCTAssertThrowsError(try box.open(Array(sealed.prefix(length))), "length \(length)")
        }
        XCTAssertThrowsError(try box.open(sealed + [0]))
    }

    func testWrongAssociatedDataOrKeyFails() throws {
        let box = try AESGCM(key: key)
        let sealed = try box.seal([1, 2, 3], associatedData: [9])
        XCTAssertThrowsError(try box.open(sealed))
        XCTAssertThrowsError(try box.open(sealed, associatedData: [8]))
        XCTAssertThrowsError(try AESGCM(key: SecureRandom.bytes(32)).open(sealed, associatedData: [9]))
    }

    func testKeyLengthMustBe32() {
        for length in [0, 16, 24, 31, 33, 64] {
            XCTAssertThrowsError(try AESGCM(key: [UInt8](repeating: 7, count: length))) {
                XCTAssertTrue(($0 as? CryptoError)?.message.contains("32 bytes") == true)
            }
        }
    }
}
