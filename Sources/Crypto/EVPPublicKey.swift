import COpenSSL

/// The public half of an asymmetric key held in one OpenSSL `EVP_PKEY`: the encodings every
/// public key has (SubjectPublicKeyInfo PEM and DER, RFC 5280 §4.1.2.7) and its fingerprint.
/// `P256PublicKey` (ES256) and `RSAPublicKey` (RS256) add their key-type check and signature
/// verification; nothing else derives from it.
///
/// `@unchecked Sendable`: wraps an `EVP_PKEY` that is never modified after `init`; OpenSSL 3
/// allows concurrent verification with one key (openssl-threads(7)).
public class EVPPublicKey: @unchecked Sendable {
    let key: EVPKey

    /// Wraps `key` (already checked by the caller). `required` so `EVPPrivateKey` can derive
    /// its typed public half.
    required init(key: EVPKey) { self.key = key }

    /// Parses a "BEGIN PUBLIC KEY" (SubjectPublicKeyInfo) PEM and keeps the key when `check`
    /// accepts it.
    /// - Throws: `CryptoError` for unreadable PEM, and whatever `check` throws for a key of
    ///   another type (e.g. `EVPKey.requireP256()`).
    convenience init(pem: String, check: (EVPKey) throws -> Void) throws {
        let key = try EVPKey.readPublic(pem: pem)
        try check(key)
        self.init(key: key)
    }

    /// "-----BEGIN PUBLIC KEY-----" SubjectPublicKeyInfo PEM.
    public var pem: String { key.publicPEM() }

    /// SubjectPublicKeyInfo DER (RFC 5280 §4.1.2.7; 91 bytes for an uncompressed P-256 key).
    public var spkiDER: [UInt8] { key.spkiDER() }

    /// `"sha256:"` followed by the 64 lowercase hex characters of SHA-256(SPKI DER); stable
    /// across PEM formatting, so usable as a key id in logs and the database.
    public var fingerprint: String { "sha256:" + Digest.sha256Hex(spkiDER) }
}
