import Crypto
import JSON
import XCTest

final class JWTTests: XCTestCase {
    let claims: [String: JSONValue] = ["iss": .string("TEAM123456"), "iat": .int(1_700_000_000)]

    func testES256SignDecodeVerify() throws {
        let key = P256PrivateKey.generate()
        let token = try JWT.sign(header: ["kid": .string("ABC123DEFG")], claims: claims, algorithm: .es256(key))
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        XCTAssertEqual(parts.count, 3)
        XCTAssertEqual(
            Base64URL.decode(String(parts[0])).map { String(decoding: $0, as: UTF8.self) },
            #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        XCTAssertEqual(Base64URL.decode(String(parts[2]))?.count, 64)
        let decoded = try JWT.decode(token)
        XCTAssertEqual(decoded.header, ["alg": .string("ES256"), "kid": .string("ABC123DEFG")])
        XCTAssertEqual(decoded.claims, claims)
        XCTAssertEqual(decoded.signingInput, Array(parts[0..<2].joined(separator: ".").utf8))
        XCTAssertNotNil(JWT.verify(token, key: key.publicKey))
        XCTAssertNil(JWT.verify(token, key: P256PrivateKey.generate().publicKey))
    }

    func testRS256SignDecodeVerify() throws {
        let key = RSATests.key
        let google: [String: JSONValue] = [
            "iss": .string("sa@project.iam.gserviceaccount.com"),
            "scope": .string("https://www.googleapis.com/auth/firebase.messaging"),
            "aud": .string("https://oauth2.googleapis.com/token"), "iat": .int(1_700_000_000), "exp": .int(1_700_003_600)
        ]
        let token = try JWT.sign(header: ["typ": .string("JWT"), "alg": .string("none")], claims: google, algorithm: .rs256(key))
        let decoded = try XCTUnwrap(JWT.verify(token, key: key.publicKey))
        XCTAssertEqual(decoded.header["alg"], .string("RS256"), "extra alg must not override the real one")
        XCTAssertEqual(decoded.claims, google)
    }

    func testTamperedTokensFail() throws {
        let key = P256PrivateKey.generate()
        let token = try JWT.sign(claims: claims, algorithm: .es256(key))
        let parts = token.split(separator: ".").map(String.init)
        var forged = claims
        forged["iss"] = .string("OTHERTEAM0")
        let forgedClaims = Base64URL.encode(JSONValue.object(forged).serialized())
        XCTAssertNil(JWT.verify([parts[0], forgedClaims, parts[2]].joined(separator: "."), key: key.publicKey))
        var sig = Base64URL.decode(parts[2])!
        sig[63] ^= 1
        XCTAssertNil(JWT.verify([parts[0], parts[1], Base64URL.encode(sig)].joined(separator: "."), key: key.publicKey))
        XCTAssertNil(JWT.verify(token + "A", key: key.publicKey))
        XCTAssertNil(JWT.verify([parts[0], parts[1], ""].joined(separator: "."), key: key.publicKey))
    }

    func testAlgorithmMismatchFails() throws {
        let ec = P256PrivateKey.generate()
        let esToken = try JWT.sign(claims: claims, algorithm: .es256(ec))
        let rsToken = try JWT.sign(claims: claims, algorithm: .rs256(RSATests.key))
        XCTAssertNil(JWT.verify(esToken, key: RSATests.key.publicKey))
        XCTAssertNil(JWT.verify(rsToken, key: ec.publicKey))
        // A header claiming another alg over a genuine ES256 signature is refused.
        for alg in ["none", "HS256", "RS256", "ES384"] {
            let header = Base64URL.encode(JSONValue.object(["alg": .string(alg)]).serialized())
            let input = header + "." + Base64URL.encode(JSONValue.object(claims).serialized())
            let token = input + "." + Base64URL.encode(try ec.signES256(Array(input.utf8)))
            XCTAssertNil(JWT.verify(token, key: ec.publicKey), alg)
        }
        // crit extensions are not understood, so never accepted (RFC 7515 §4.1.11).
        let crit = try JWT.sign(header: ["crit": .array([.string("exp")])], claims: claims, algorithm: .es256(ec))
        XCTAssertNil(JWT.verify(crit, key: ec.publicKey))
    }

    func testMalformedDecodeThrows() {
        let object = Base64URL.encode(Array(#"{"alg":"ES256"}"#.utf8))
        let malformed = [
            "", "a", "a.b", "a.b.c.d", "!!.\(object).", "\(object).\(object)=.",
            Base64URL.encode(Array("[1]".utf8)) + ".\(object).",
            "\(object)." + Base64URL.encode(Array("\"str\"".utf8)) + ".",
            Base64URL.encode(Array(#"{"alg":1}"#.utf8)) + ".\(object).",
            Base64URL.encode(Array(#"{"alg":"ES256","alg":"none"}"#.utf8)) + ".\(object).",
            String(repeating: "A", count: 20_000) + ".\(object)."
        ]
        for token in malformed {
            XCTAssertThrowsError(try JWT.decode(token), token) { XCTAssertTrue($0 is CryptoError) }
        }
        XCTAssertNoThrow(try JWT.decode("\(object).\(object)."))
    }

    func testES256TokenVerifiesWithOpenSSLCLI() throws {
        try OpenSSLCLI.require()
        let dir = try TempDir()
        defer { dir.cleanup() }
        let key = P256PrivateKey.generate()
        let token = try JWT.sign(header: ["kid": .string("KEYID00001")], claims: claims, algorithm: .es256(key))
        let decoded = try JWT.decode(token)
        let result = try OpenSSLCLI.run([
            "dgst", "-sha256", "-verify", try dir.write("pub.pem", key.publicKey.pem),
            "-signature", try dir.write("sig.der", derECDSASignature(raw: decoded.signature)),
            try dir.write("input", decoded.signingInput)
        ])
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("Verified OK"))
    }
}
