import COpenSSL

/// An RSA public key for verifying RS256 signatures (RFC 7518 §3.3) — e.g. the local FCM
/// sandbox checking OAuth2 JWT assertions.
///
/// `@unchecked Sendable`: as `EVPPublicKey` (an `EVP_PKEY` never modified after `init`).
public final class RSAPublicKey: EVPPublicKey, @unchecked Sendable {
    /// Parses a "BEGIN PUBLIC KEY" (SubjectPublicKeyInfo) PEM holding an RSA key.
    /// - Throws: `CryptoError` for unreadable PEM or a non-RSA key ("not an RSA key").
    public convenience init(pem: String) throws {
        try self.init(pem: pem) { try $0.requireRSA() }
    }

    /// `true` when `signature` is a valid RS256 (RSASSA-PKCS1-v1_5, SHA-256) signature of
    /// `message`; any mismatch or malformed signature gives `false`.
    public func verifyRS256(signature: [UInt8], message: [UInt8]) -> Bool {
        key.verifySHA256(signature: signature, message: message)
    }
}
