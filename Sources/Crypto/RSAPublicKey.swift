import COpenSSL

/// An RSA public key for verifying RS256 signatures (RFC 7518 §3.3) — e.g. the local FCM
/// sandbox checking OAuth2 JWT assertions.
///
/// `@unchecked Sendable`: wraps an `EVP_PKEY` that is never modified after `init`; OpenSSL 3
/// allows concurrent verification with one key.
public final class RSAPublicKey: @unchecked Sendable {
    let key: EVPKey

    init(key: EVPKey) { self.key = key }

    /// Parses a "BEGIN PUBLIC KEY" (SubjectPublicKeyInfo) PEM holding an RSA key.
    /// - Throws: `CryptoError` for unreadable PEM or a non-RSA key ("not an RSA key").
    public init(pem: String) throws {
        let key = try EVPKey.readPublic(pem: pem)
        guard key.isRSA else { throw CryptoError("not an RSA key") }
        self.key = key
    }

    /// "-----BEGIN PUBLIC KEY-----" SubjectPublicKeyInfo PEM.
    public var pem: String { key.publicPEM() }

    /// SubjectPublicKeyInfo DER (RFC 5280 §4.1.2.7).
    public var spkiDER: [UInt8] { key.spkiDER() }

    /// `"sha256:"` followed by the 64 lowercase hex characters of SHA-256(SPKI DER).
    public var fingerprint: String { "sha256:" + Digest.sha256Hex(spkiDER) }

    /// `true` when `signature` is a valid RS256 (RSASSA-PKCS1-v1_5, SHA-256) signature of
    /// `message`; any mismatch or malformed signature gives `false`.
    public func verifyRS256(signature: [UInt8], message: [UInt8]) -> Bool {
        key.verifySHA256(signature: signature, message: message)
    }
}
