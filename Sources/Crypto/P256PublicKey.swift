import COpenSSL

/// An ECDSA public key on NIST P-256 (prime256v1), for verifying ES256 signatures (RFC 7518
/// §3.4) — e.g. the local APNs sandbox checking provider tokens.
///
/// `@unchecked Sendable`: wraps an `EVP_PKEY` that is never modified after `init`; OpenSSL 3
/// allows concurrent verification with one key.
public final class P256PublicKey: @unchecked Sendable {
    let key: EVPKey

    init(key: EVPKey) { self.key = key }

    /// Parses a "BEGIN PUBLIC KEY" (SubjectPublicKeyInfo) PEM.
    /// - Throws: `CryptoError` for unreadable PEM and `CryptoError("not a P-256 (prime256v1)
    ///   key")` for another key type or curve.
    public init(pem: String) throws {
        let key = try EVPKey.readPublic(pem: pem)
        guard key.isP256 else { throw CryptoError("not a P-256 (prime256v1) key") }
        self.key = key
    }

    /// "-----BEGIN PUBLIC KEY-----" SubjectPublicKeyInfo PEM.
    public var pem: String { key.publicPEM() }

    /// SubjectPublicKeyInfo DER (RFC 5280 §4.1.2.7; 91 bytes for an uncompressed P-256 key).
    public var spkiDER: [UInt8] { key.spkiDER() }

    /// `"sha256:"` followed by the 64 lowercase hex characters of SHA-256(SPKI DER); stable
    /// across PEM formatting, so usable as a key id in logs and the database.
    public var fingerprint: String { "sha256:" + Digest.sha256Hex(spkiDER) }

    /// `true` when `signature` is a valid ES256 signature of `message`: raw 64-byte `r ‖ s`
    /// (RFC 7518 §3.4). Any other length, a DER signature, or a mismatch gives `false`.
    public func verifyES256(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let der = ECDSASignature.der(fromRaw: signature) else { return false }
        return key.verifySHA256(signature: der, message: message)
    }
}
