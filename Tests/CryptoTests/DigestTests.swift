import Crypto
import XCTest

final class DigestTests: XCTestCase {
    func testSHA256KnownVectors() {
        XCTAssertEqual(Digest.sha256Hex([]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(Digest.sha256Hex(Array("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(Digest.sha256(Array("abc".utf8)).count, 32)
    }

    func testHMACSHA256RFC4231Case2() {
        let mac = Digest.hmacSHA256(key: Array("Jefe".utf8), data: Array("what do ya want for nothing?".utf8))
        XCTAssertEqual(hex(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testHMACSHA256RFC4231Case1AndEmptyInputs() {
        let mac = Digest.hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), data: Array("Hi There".utf8))
        XCTAssertEqual(hex(mac), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        // HMAC-SHA256 with empty key and message (widely published value).
        XCTAssertEqual(hex(Digest.hmacSHA256(key: [], data: [])), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    func testConstantTimeEquals() {
        XCTAssertTrue(ConstantTime.equals([], []))
        XCTAssertTrue(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(ConstantTime.equals([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(ConstantTime.equals([1, 2, 3], [1, 2]))
        XCTAssertFalse(ConstantTime.equals([], [0]))
    }

    func testSecureRandom() {
        XCTAssertEqual(SecureRandom.bytes(0), [])
        let a = SecureRandom.bytes(32), b = SecureRandom.bytes(32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
    }

    func testBase64URLRFC4648Vectors() {
        let vectors = ["": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in vectors {
            XCTAssertEqual(Base64URL.encode(Array(plain.utf8)), encoded)
            XCTAssertEqual(Base64URL.decode(encoded), Array(plain.utf8))
        }
        XCTAssertEqual(Base64URL.encode([0xFB, 0xFF]), "-_8")  // standard base64: "+/8="
        XCTAssertEqual(Base64URL.encode([0xFB, 0xFF, 0xBF]), "-_-_")
        XCTAssertEqual(Base64URL.decode("-_-_"), [0xFB, 0xFF, 0xBF])
        for _ in 0..<50 {
            let random = SecureRandom.bytes(Int.random(in: 0...40))
            XCTAssertEqual(Base64URL.decode(Base64URL.encode(random)), random)
        }
    }

    func testBase64URLRejectsMalformed() {
        XCTAssertNil(Base64URL.decode("Zg=="))  // padding
        XCTAssertNil(Base64URL.decode("Z"))  // impossible length
        XCTAssertNil(Base64URL.decode("Zh"))  // non-zero unused bits
        XCTAssertNil(Base64URL.decode("a+b/"))  // standard alphabet
        XCTAssertNil(Base64URL.decode("Zm 9v"))  // whitespace
        XCTAssertNil(Base64URL.decode("Zm9v\u{e9}"))
    }
}
