import Crypto
import XCTest

final class RSATests: XCTestCase {
    static let key = RSAPrivateKey.generate()

    func testPEMRoundTripAndSignVerify() throws {
        let key = RSATests.key
        XCTAssertEqual(key.bits, 2048)
        XCTAssertTrue(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let parsed = try RSAPrivateKey(pem: key.pkcs8PEM)
        XCTAssertEqual(parsed.publicKey.fingerprint, key.publicKey.fingerprint)
        XCTAssertTrue(key.publicKey.fingerprint.hasPrefix("sha256:"))
        let pub = try RSAPublicKey(pem: key.publicKey.pem)
        let message = Array("assertion".utf8)
        let signature = try key.signRS256(message)
        XCTAssertEqual(signature.count, 256)
        XCTAssertEqual(try key.signRS256(message), signature, "PKCS#1 v1.5 is deterministic")
        XCTAssertTrue(pub.verifyRS256(signature: signature, message: message))
        XCTAssertFalse(pub.verifyRS256(signature: signature, message: message + [0]))
        var flipped = signature
        flipped[0] ^= 0x80
        XCTAssertFalse(pub.verifyRS256(signature: flipped, message: message))
        XCTAssertFalse(pub.verifyRS256(signature: [], message: message))
        XCTAssertFalse(RSAPrivateKey.generate().publicKey.verifyRS256(signature: signature, message: message))
    }

    func testPKCS1PEMAccepted() throws {
        try OpenSSLCLI.require()
        let dir = try TempDir()
        defer { dir.cleanup() }
        let out = try OpenSSLCLI.run(["pkey", "-in", try dir.write("k.pem", RSATests.key.pkcs8PEM), "-traditional"])
        XCTAssertTrue(out.output.hasPrefix("-----BEGIN RSA PRIVATE KEY-----"), out.output)
        XCTAssertEqual(try RSAPrivateKey(pem: out.output).publicKey.fingerprint, RSATests.key.publicKey.fingerprint)
    }

    func testNonRSARejected() {
        XCTAssertThrowsError(try RSAPrivateKey(pem: P256PrivateKey.generate().pkcs8PEM)) {
            XCTAssertEqual($0 as? CryptoError, CryptoError("not an RSA key"))
        }
        XCTAssertThrowsError(try RSAPublicKey(pem: P256PrivateKey.generate().publicKey.pem))
        XCTAssertThrowsError(try RSAPrivateKey(pem: "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----"))
        XCTAssertThrowsError(try RSAPublicKey(pem: ""))
    }

    func testSignatureVerifiesWithOpenSSLCLI() throws {
        try OpenSSLCLI.require()
        let dir = try TempDir()
        defer { dir.cleanup() }
        let message = Array("rs256 input".utf8)
        let result = try OpenSSLCLI.run([
            "dgst", "-sha256", "-verify", try dir.write("pub.pem", RSATests.key.publicKey.pem),
            "-signature", try dir.write("sig", try RSATests.key.signRS256(message)),
            try dir.write("msg", message)
        ])
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("Verified OK"))
    }
}
