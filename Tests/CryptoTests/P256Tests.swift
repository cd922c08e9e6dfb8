import Crypto
import Foundation
import XCTest

final class P256Tests: XCTestCase {
    func testGeneratePEMRoundTrip() throws {
        let key = P256PrivateKey.generate()
        let pem = key.pkcs8PEM
        XCTAssertTrue(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let parsed = try P256PrivateKey(pem: pem)
        XCTAssertEqual(parsed.publicKey.spkiDER, key.publicKey.spkiDER)
        XCTAssertEqual(parsed.pkcs8PEM, pem)
        let pub = try P256PublicKey(pem: key.publicKey.pem)
        XCTAssertTrue(key.publicKey.pem.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        XCTAssertEqual(pub.spkiDER.count, 91)
        XCTAssertEqual(pub.fingerprint, "sha256:" + Digest.sha256Hex(pub.spkiDER))
        XCTAssertEqual(pub.fingerprint.count, 7 + 64)
        XCTAssertNotEqual(P256PrivateKey.generate().publicKey.fingerprint, pub.fingerprint)
    }

    func testSignVerify() throws {
        let key = P256PrivateKey.generate()
        let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ0ZWFtIn0".utf8)
        // Many signatures: r or s with a leading zero byte must still come out as 64 bytes.
        for _ in 0..<200 {
            let signature = try key.signES256(message)
            XCTAssertEqual(signature.count, 64)
            XCTAssertTrue(key.publicKey.verifyES256(signature: signature, message: message))
        }
        let signature = try key.signES256(message)
        XCTAssertFalse(key.publicKey.verifyES256(signature: signature, message: message + [0x20]))
        XCTAssertFalse(key.publicKey.verifyES256(signature: signature, message: []))
        var flipped = signature
        flipped[10] ^= 1
        XCTAssertFalse(key.publicKey.verifyES256(signature: flipped, message: message))
        XCTAssertFalse(key.publicKey.verifyES256(signature: Array(signature.prefix(63)), message: message))
        XCTAssertFalse(key.publicKey.verifyES256(signature: [UInt8](repeating: 0, count: 64), message: message))
        XCTAssertFalse(P256PrivateKey.generate().publicKey.verifyES256(signature: signature, message: message))
        XCTAssertTrue(key.publicKey.verifyES256(signature: try key.signES256([]), message: []))
    }

    /// One key shared by many threads (the dispatcher signs APNs tokens concurrently).
    func testConcurrentSignAndVerifyWithOneKey() {
        final class Counter: @unchecked Sendable {
            let lock = NSLock()
            var failures = 0
            func fail() { lock.lock(); failures += 1; lock.unlock() }
        }
        let key = P256PrivateKey.generate()
        let counter = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for j in 0..<50 {
                let message = Array("thread \(i) message \(j)".utf8)
                guard let signature = try? key.signES256(message),
                    key.publicKey.verifyES256(signature: signature, message: message)
                else { counter.fail(); continue }
            }
        }
        XCTAssertEqual(counter.failures, 0)
    }

    func testSEC1PEMAccepted() throws {
        let key = try P256PrivateKey(pem: Fixtures.p256SEC1)
        XCTAssertTrue(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let signature = try key.signES256([1, 2, 3])
        XCTAssertTrue(key.publicKey.verifyES256(signature: signature, message: [1, 2, 3]))
    }

    func testOtherKeyTypesRejected() throws {
        let notP256 = CryptoError("not a P-256 (prime256v1) key")
        XCTAssertThrowsError(try P256PrivateKey(pem: RSAPrivateKey.generate().pkcs8PEM)) { XCTAssertEqual($0 as? CryptoError, notP256) }
        XCTAssertThrowsError(try P256PrivateKey(pem: Fixtures.p384PKCS8)) { XCTAssertEqual($0 as? CryptoError, notP256) }
        XCTAssertThrowsError(try P256PrivateKey(pem: Fixtures.ed25519)) { XCTAssertEqual($0 as? CryptoError, notP256) }
        XCTAssertThrowsError(try P256PublicKey(pem: RSAPrivateKey.generate().publicKey.pem)) { XCTAssertEqual($0 as? CryptoError, notP256) }
    }

    func testGarbagePEMThrows() {
        let key = P256PrivateKey.generate()
        let inputs = [
            "", "garbage", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            String(key.pkcs8PEM.prefix(60)), key.publicKey.pem, Fixtures.encryptedP256,
            String(repeating: "A", count: 70_000)
        ]
        for input in inputs {
            XCTAssertThrowsError(try P256PrivateKey(pem: input)) { error in
                XCTAssertTrue(error is CryptoError)
                XCTAssertFalse(String(describing: error).contains("MIG"), "error must not echo key material")
            }
        }
        XCTAssertThrowsError(try P256PublicKey(pem: key.pkcs8PEM))
        XCTAssertThrowsError(try P256PublicKey(pem: "nope"))
    }

    /// RFC 7515 Appendix A.3: ES256 example (P-256 key as JWK, token and signature from the RFC).
    func testRFC7515AppendixA3SignatureVerifies() throws {
        let x = Base64URL.decode("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")!
        let y = Base64URL.decode("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")!
        let spki = bytes(hex: "3059301306072a8648ce3d020106082a8648ce3d030107034200") + [0x04] + x + y
        let key = try P256PublicKey(pem: pem("PUBLIC KEY", der: spki))
        XCTAssertEqual(key.spkiDER, spki)
        let token =
            "eyJhbGciOiJFUzI1NiJ9"
            + ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            + ".DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
        let decoded = try XCTUnwrap(JWT.verify(token, key: key))
        XCTAssertEqual(decoded.claims["iss"], .string("joe"))
        XCTAssertEqual(decoded.claims["exp"], .int(1_300_819_380))
    }

    /// Independent check: the openssl CLI verifies our raw signature after a test-side DER encoding.
    func testSignatureVerifiesWithOpenSSLCLI() throws {
        try OpenSSLCLI.require()
        let dir = try TempDir()
        defer { dir.cleanup() }
        let key = P256PrivateKey.generate()
        let message = Array("signed by LiveRelay".utf8)
        let raw = try key.signES256(message)
        let pub = try dir.write("pub.pem", key.publicKey.pem)
        let sig = try dir.write("sig.der", derECDSASignature(raw: raw))
        let msg = try dir.write("msg.bin", message)
        let ok = try OpenSSLCLI.run(["dgst", "-sha256", "-verify", pub, "-signature", sig, msg])
        XCTAssertEqual(ok.status, 0, ok.output)
        XCTAssertTrue(ok.output.contains("Verified OK"), ok.output)
        let bad = try OpenSSLCLI.run(["dgst", "-sha256", "-verify", pub, "-signature", sig, try dir.write("other.bin", message + [1])])
        XCTAssertNotEqual(bad.status, 0)
        // And the other direction: a key made by the CLI parses and its public key matches.
        let cli = try OpenSSLCLI.run(["pkey", "-in", try dir.write("key.pem", key.pkcs8PEM), "-pubout"])
        XCTAssertEqual(cli.output, key.publicKey.pem)
    }
}
