import JSON

/// Compact JWS/JWT signing and checking for the two provider tokens LiveRelay makes:
/// - APNs provider token, ES256 with header `{"alg":"ES256","kid":<key id>}` and claims
///   `{"iss":<team id>,"iat":<epoch s>}` (Apple: "Establishing a token-based connection to
///   APNs"; docs/providers.md);
/// - FCM OAuth2 assertion, RS256 with claims `{iss, scope, aud, iat, exp}` (Google: "Using
///   OAuth 2.0 for Server to Server Applications"; docs/providers.md).
///
/// Formats: RFC 7515 §7.1 compact serialisation, RFC 7519 claims, RFC 7518 §3.3/§3.4
/// algorithms. JSON is written compact with sorted keys (`JSONValue.serialized()`).
public enum JWT {
    /// Longest token `decode`/`verify` accept (characters); provider tokens are < 1 KiB.
    public static let maxTokenLength = 16 * 1024

    /// The signing algorithm and its key.
    public enum Algorithm: Sendable {
        /// ECDSA P-256 + SHA-256, raw 64-byte signature (RFC 7518 §3.4). APNs.
        case es256(P256PrivateKey)
        /// RSASSA-PKCS1-v1_5 + SHA-256 (RFC 7518 §3.3). Google OAuth2 assertions.
        case rs256(RSAPrivateKey)

        /// The JOSE `alg` value: `"ES256"` or `"RS256"`.
        public var name: String {
            switch self {
            case .es256: return "ES256"
            case .rs256: return "RS256"
            }
        }
    }

    /// A token split into its parts (nothing verified by `decode` itself).
    public struct Decoded: Sendable {
        /// JOSE header (`alg`, `kid`, `typ`, …).
        public let header: [String: JSONValue]
        /// Claims set (`iss`, `iat`, …).
        public let claims: [String: JSONValue]
        /// ASCII bytes of `base64url(header) "." base64url(claims)`: what the signature covers.
        public let signingInput: [UInt8]
        /// Decoded signature bytes (64 for ES256, modulus length for RS256).
        public let signature: [UInt8]
    }

    /// Signs `claims` and returns the compact token `b64u(header).b64u(claims).b64u(sig)`.
    ///
    /// The header is `extra` plus `"alg"` from `algorithm`; an `"alg"` in `extra` is
    /// overridden so the header can never lie about the signature. Add `"kid"` (APNs key id)
    /// or `"typ": "JWT"` through `extra`.
    /// - Throws: `CryptoError` on a signing failure.
    public static func sign(
        header extra: [String: JSONValue] = [:], claims: [String: JSONValue],
        algorithm: Algorithm
    ) throws -> String {
        var header = extra
        header["alg"] = .string(algorithm.name)
        let input =
            Base64URL.encode(JSONValue.object(header).serialized()) + "."
            + Base64URL.encode(JSONValue.object(claims).serialized())
        let bytes = Array(input.utf8)
        let signature: [UInt8]
        switch algorithm {
        case .es256(let key): signature = try key.signES256(bytes)
        case .rs256(let key): signature = try key.signRS256(bytes)
        }
        return input + "." + Base64URL.encode(signature)
    }

    /// Splits and decodes a compact token without checking its signature.
    /// - Throws: `CryptoError` unless the token has exactly three base64url segments (RFC
    ///   7515 §7.1), header and claims are JSON objects (strict RFC 8259, no duplicate keys),
    ///   the header has a string `alg`, and the token is at most `maxTokenLength` long.
    public static func decode(_ token: String) throws -> Decoded {
        let utf8 = Array(token.utf8)
        guard utf8.count <= maxTokenLength else { throw CryptoError("JWT is too long") }
        let parts = utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw CryptoError("JWT must have three segments") }
        let texts = parts.map { String(decoding: $0, as: UTF8.self) }
        guard let headerBytes = Base64URL.decode(texts[0]), let claimBytes = Base64URL.decode(texts[1]),
            let signature = Base64URL.decode(texts[2])
        else { throw CryptoError("JWT segment is not base64url") }
        guard case .object(let header)? = try? JSONValue.parse(headerBytes, maxDepth: 8) else {
            throw CryptoError("JWT header is not a JSON object")
        }
        guard case .object(let claims)? = try? JSONValue.parse(claimBytes, maxDepth: 16) else {
            throw CryptoError("JWT claims are not a JSON object")
        }
        guard case .string? = header["alg"] else { throw CryptoError("JWT header has no alg") }
        let signingInput = Array(utf8[..<(parts[0].count + 1 + parts[1].count)])
        return Decoded(header: header, claims: claims, signingInput: signingInput, signature: signature)
    }

    /// Decodes `token` and checks its ES256 signature with `key`.
    /// - Returns: the decoded token, or `nil` when malformed, `alg` is not `"ES256"`, the
    ///   header has `crit` (no extensions are understood, RFC 7515 §4.1.11) or the signature
    ///   does not verify. Claims (`iat`, `exp`, …) are not checked: that is the caller's job.
    public static func verify(_ token: String, key: P256PublicKey) -> Decoded? {
        guard let decoded = acceptable(token, alg: "ES256") else { return nil }
        return key.verifyES256(signature: decoded.signature, message: decoded.signingInput) ? decoded : nil
    }

    /// Decodes `token` and checks its RS256 signature with `key`; as the ES256 overload, with
    /// `alg` required to be `"RS256"`.
    public static func verify(_ token: String, key: RSAPublicKey) -> Decoded? {
        guard let decoded = acceptable(token, alg: "RS256") else { return nil }
        return key.verifyRS256(signature: decoded.signature, message: decoded.signingInput) ? decoded : nil
    }

    private static func acceptable(_ token: String, alg: String) -> Decoded? {
        guard let decoded = try? decode(token), decoded.header["alg"] == .string(alg),
            decoded.header["crit"] == nil
        else { return nil }
        return decoded
    }
}
