import Foundation
import Crypto
import HTTP2
import Metrics

/// Checks of a tenant's provider credentials without sending a push, for `liverelay doctor`
/// (docs/operations.md "liverelay doctor"). Minting happens locally; only
/// `connect` and `fcmAccessToken` touch the network (the configured provider hosts and the
/// service account's `token_uri`).
public enum ProviderProbe {
    /// Signs an APNs provider token exactly as a push would (Apple "Establishing a token-based
    /// connection to APNs": ES256 JWT, header `{alg, kid}`, claims `{iss: team id, iat}`) and
    /// returns it. `now` sets `iat` (whole epoch seconds).
    /// - Throws: `CryptoError` when the key cannot sign.
    public static func mintAPNsToken(_ credential: APNsCredential, now: Date = Date()) throws -> String {
        try JWT.sign(
            header: ["kid": .string(credential.keyId)],
            claims: ["iss": .string(credential.teamId), "iat": .int(Int64(now.timeIntervalSince1970.rounded(.down)))],
            algorithm: .es256(credential.privateKey))
    }

    /// Signs the OAuth2 JWT-bearer assertion FCM's token endpoint expects (Google "Using OAuth
    /// 2.0 for Server to Server Applications": RS256, `{iss: client_email, scope, aud: token_uri,
    /// iat, exp: iat + 3600}`) and returns it, without sending it.
    /// - Throws: `CryptoError` when the key cannot sign.
    public static func mintFCMAssertion(_ credential: FCMCredential, now: Date = Date()) throws -> String {
        let iat = Int64(now.timeIntervalSince1970.rounded(.down))
        return try JWT.sign(
            header: ["typ": "JWT", "kid": .string(credential.privateKeyId)],
            claims: [
                "iss": .string(credential.clientEmail), "scope": .string(FCMAccessTokenCache.scope),
                "aud": .string(credential.tokenURI), "iat": .int(iat), "exp": .int(iat + 3600)
            ],
            algorithm: .rs256(credential.privateKey))
    }

    /// Exchanges the assertion for an access token at the credential's `token_uri` (HTTP/2,
    /// TLS verified against the system CAs plus `endpoints.extraCAFile`) and returns the
    /// token's length in characters (the token itself is a secret and is dropped).
    /// - Throws: `ProbeError` naming the HTTP status and OAuth `error`, or the transport failure.
    public static func fcmAccessToken(_ credential: FCMCredential, endpoints: ProviderEndpoints) throws -> Int {
        let cache = FCMAccessTokenCache(endpoints: endpoints, metrics: ProviderMetrics(MetricsRegistry()), now: Date.init)
        defer { cache.close() }
        do {
            return try cache.accessToken(credential).count
        } catch .transport(let f) {
            throw ProbeError(message: "token_uri \(credential.tokenURI) unreachable: \(f)")
        } catch .rejected(let status, let error, _) {
            throw ProbeError(message: "token_uri \(credential.tokenURI) answered \(status) \(error ?? "")".trimmingCharacters(in: .whitespaces))
        }
    }

    /// Opens one HTTP/2 connection to `url` (TCP, TLS with certificate and host name
    /// verification, ALPN h2, the peer's SETTINGS) within `endpoints.connectTimeoutSeconds`,
    /// closes it and returns how long it took, in seconds.
    /// - Throws: `ProbeError` with the transport failure.
    public static func connect(_ url: URL, endpoints: ProviderEndpoints) throws -> Double {
        let started = Date()
        do {
            let connection = try HTTP2Connection(configuration: endpoints.configuration(url))
            connection.close()
        } catch {
            throw ProbeError(message: "\(url.absoluteString) unreachable: \(error)")
        }
        return Date().timeIntervalSince(started)
    }

    /// Why a probe failed; `message` names the host or endpoint and never holds a secret.
    public struct ProbeError: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }
}
