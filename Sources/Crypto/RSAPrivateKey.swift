import COpenSSL
import CShims

/// An RSA private key for RS256 (RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518 §3.3), e.g. the
/// `private_key` of a Google service account JSON used for the FCM OAuth2 JWT assertion
/// (Google: "Using OAuth 2.0 for Server to Server Applications"; docs/providers.md).
///
/// `@unchecked Sendable`: as `EVPPrivateKey` (an `EVP_PKEY` never modified after `init`).
public final class RSAPrivateKey: EVPPrivateKey<RSAPublicKey>, @unchecked Sendable {
    /// Smallest modulus accepted when parsing or generating (bits).
    public static let minimumBits = 2048
    /// Largest modulus accepted when parsing (bits): larger keys only make every signature
    /// slower (a 16384-bit RS256 signature costs ~100× a 2048-bit one); Google issues 2048.
    public static let maximumBits = 4096

    /// Parses an RSA private key PEM: PKCS#8 "BEGIN PRIVATE KEY" (Google service accounts;
    /// the JSON's `\n` escapes must already be decoded) or PKCS#1 "BEGIN RSA PRIVATE KEY".
    /// - Throws: `CryptoError` for unreadable or encrypted PEM, a non-RSA key ("not an RSA
    ///   key"), or a modulus under 2048 or over 4096 bits.
    public convenience init(pem: String) throws {
        try self.init(pem: pem) { key in
            try key.requireRSA()
            guard key.bits >= RSAPrivateKey.minimumBits else { throw CryptoError("RSA key shorter than 2048 bits") }
            guard key.bits <= RSAPrivateKey.maximumBits else { throw CryptoError("RSA key longer than 4096 bits") }
        }
    }

    /// A fresh RSA key pair, public exponent 65537 (tests and the local FCM sandbox).
    /// `bits` must be 2048…16384; 2048-bit generation takes roughly 50–500 ms.
    public static func generate(bits: Int = 2048) -> RSAPrivateKey {
        precondition(bits >= minimumBits && bits <= 16384, "RSAPrivateKey.generate: bits must be 2048...16384")
        return RSAPrivateKey(key: generateKey { cshim_evp_rsa_gen(UInt32(bits)) })
    }

    /// Modulus size in bits.
    public var bits: Int { key.bits }

    /// RS256 signature of `message`: RSASSA-PKCS1-v1_5 over SHA-256, as many bytes as the
    /// modulus (256 for RSA-2048).
    /// - Throws: `CryptoError` on an OpenSSL failure.
    public func signRS256(_ message: [UInt8]) throws -> [UInt8] {
        try key.signSHA256(message)
    }
}
