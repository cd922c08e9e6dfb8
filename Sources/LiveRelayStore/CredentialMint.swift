import Crypto
import LiveRelayCore

/// Makes new credentials (docs/credentials.md): a fresh row id, 32 random bytes of secret (256 bits), the
/// token with its checksum, and the argon2id hash that is the only thing stored.
public enum CredentialMint {
    /// A minted credential: `token` is shown once to the caller and never stored;
    /// `secretHash` is the argon2id PHC string stored in the key's row.
    public struct Minted: Sendable {
        public let id: String
        public let token: String
        public let secretHash: String
    }

    /// Mints a credential of `kind` (its row id kind follows from it).
    /// - Throws: `CryptoError` if argon2 fails (out of memory).
    public static func make(_ kind: CredentialKind) throws -> Minted {
        let id = Identifier.make(kind.idKind)
        let (token, parsed) = CredentialToken.make(kind: kind, id: id, secretBytes: SecureRandom.bytes(32))
        return Minted(id: id, token: token, secretHash: try Argon2id.hash(Array(parsed.secret.utf8)))
    }

    /// True when `token`'s secret matches the stored argon2id `hash` (~20 ms: callers cache).
    public static func verify(_ token: CredentialToken, hash: String) -> Bool {
        Argon2id.verify(Array(token.secret.utf8), encoded: hash)
    }
}
