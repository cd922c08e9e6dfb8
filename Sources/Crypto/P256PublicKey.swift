import COpenSSL

/// An ECDSA public key on NIST P-256 (prime256v1), for verifying ES256 signatures (RFC 7518
/// §3.4) — e.g. the local APNs sandbox checking provider tokens.
///
/// `@unchecked Sendable`: as `EVPPublicKey` (an `EVP_PKEY` never modified after `init`).
public final class P256PublicKey: EVPPublicKey, @unchecked Sendable {
    /// Parses a "BEGIN PUBLIC KEY" (SubjectPublicKeyInfo) PEM.
    /// - Throws: `CryptoError` for unreadable PEM and `CryptoError("not a P-256 (prime256v1)
    ///   key")` for another key type or curve.
    public convenience init(pem: String) throws {
        try self.init(pem: pem) { try $0.requireP256() }
    }

    /// `true` when `signature` is a valid ES256 signature of `message`: raw 64-byte `r ‖ s`
    /// (RFC 7518 §3.4). Any other length, a DER signature, or a mismatch gives `false`.
    public func verifyES256(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let der = ECDSASignature.der(fromRaw: signature) else { return false }
        return key.verifySHA256(signature: der, message: message)
    }
}
