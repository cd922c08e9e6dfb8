import COpenSSL

/// A private key held in one OpenSSL `EVP_PKEY`, with its typed public half derived once at
/// construction and its PKCS#8 export. `P256PrivateKey` (ES256) and `RSAPrivateKey` (RS256)
/// add their key-type checks, generation and signing; nothing else derives from it.
///
/// `@unchecked Sendable`: wraps an `EVP_PKEY` that is never modified after `init`; OpenSSL 3
/// allows concurrent signing with one key (each signature uses its own `EVP_MD_CTX`).
public class EVPPrivateKey<PublicKey: EVPPublicKey>: @unchecked Sendable {
    let key: EVPKey
    /// The public half, derived once at construction.
    public let publicKey: PublicKey

    /// Wraps `key` (already checked by the caller) and derives its public half.
    init(key: EVPKey) {
        self.key = key
        self.publicKey = PublicKey(key: key.publicOnly())
    }

    /// Parses a private key PEM (PKCS#8 "BEGIN PRIVATE KEY" or the traditional "BEGIN EC/RSA
    /// PRIVATE KEY"; text around the block is ignored) and keeps the key when `check` accepts it.
    /// - Throws: `CryptoError` for unreadable, empty, oversized (> 64 KiB) or encrypted PEM, and
    ///   whatever `check` throws for a key of another type or size.
    convenience init(pem: String, check: (EVPKey) throws -> Void) throws {
        let key = try EVPKey.readPrivate(pem: pem)
        try check(key)
        self.init(key: key)
    }

    /// Unencrypted PKCS#8 PEM (a "BEGIN PRIVATE KEY" block; for P-256 the `.p8` shape).
    /// Secret: never log it.
    public var pkcs8PEM: String { key.pkcs8PEM() }
}
