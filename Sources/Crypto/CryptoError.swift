/// A failure inside the Crypto module: bad input (malformed PEM, wrong key type, wrong key
/// length, tampered ciphertext, malformed JWT) or an OpenSSL/libargon2 failure.
///
/// `message` is a fixed English phrase, optionally followed by OpenSSL's reason string in
/// parentheses (e.g. "cannot read private key PEM (no start line)"). It never contains key
/// material, plaintext, secrets or tokens, so it is safe to log.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, without any secret or key material.
    public let message: String

    /// Creates an error with a fixed, secret-free message.
    public init(_ message: String) { self.message = message }

    /// `"CryptoError: <message>"`.
    public var description: String { "CryptoError: \(message)" }
}
