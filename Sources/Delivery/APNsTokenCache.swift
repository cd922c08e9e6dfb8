import Foundation
import Crypto
import JSON
import Locking
import Synchronization

/// APNs provider tokens (docs/providers.md; Apple "Establishing a token-based connection to APNs"): one
/// ES256 JWT per (team, key) — header `{"alg":"ES256","kid":<key id>}`, claims
/// `{"iss":<team id>,"iat":<epoch s>}` — shared by every topic and every connection of that key.
///
/// A token is reused until its own `iat` is `refreshAfterSeconds` old (default 20 min), then
/// replaced at the next use: Apple rejects tokens older than 60 min (`ExpiredProviderToken`) and
/// refreshing more often than every 20 min (`TooManyProviderTokenUpdates`). Since a token is
/// never handed out at or beyond `refreshAfterSeconds` (< 60 min), none older than that is ever
/// sent. `refresh(_:replacing:)` answers `ExpiredProviderToken`: it mints a new token only if the
/// failed one is still current, so concurrent failures of one token cause one refresh.
///
/// The clock is injected (`now`), so tests can run hours of simulated time.
public final class APNsTokenCache: Sendable {
    struct Key: Hashable { let teamId: String; let keyId: String; let fingerprint: String }
    struct Token { let value: String; let issuedAt: Int64 }

    /// Age (seconds of its `iat`) from which a token is replaced at its next use.
    public let refreshAfterSeconds: Int64
    let now: @Sendable () -> Date
    private let tokens = Locked<[Key: Token]>([:])
    private let minted = Atomic<Int>(0)

    /// - Parameter refreshAfterSeconds: clamped to 1200…3000 (20…50 min).
    public init(refreshAfterSeconds: Int64 = 20 * 60, now: @escaping @Sendable () -> Date = Date.init) {
        self.refreshAfterSeconds = min(max(refreshAfterSeconds, 1200), 3000)
        self.now = now
    }

    /// The current token of `credential`'s (team, key), minting one when there is none or it
    /// is `refreshAfterSeconds` old.
    public func token(for credential: APNsCredential) throws -> String {
        let key = Key(teamId: credential.teamId, keyId: credential.keyId, fingerprint: credential.fingerprint)
        let nowSeconds = epochSeconds()
        return try tokens.withLock { t in
            if let existing = t[key], nowSeconds - existing.issuedAt < refreshAfterSeconds { return existing.value }
            let fresh = try mint(credential, iat: nowSeconds)
            t[key] = fresh
            return fresh.value
        }
    }

    /// After `403 ExpiredProviderToken` for `failed`: a new token, unless another caller already
    /// replaced `failed` (then that one).
    public func refresh(for credential: APNsCredential, replacing failed: String) throws -> String {
        let key = Key(teamId: credential.teamId, keyId: credential.keyId, fingerprint: credential.fingerprint)
        let nowSeconds = epochSeconds()
        return try tokens.withLock { t in
            if let existing = t[key], existing.value != failed { return existing.value }
            let fresh = try mint(credential, iat: nowSeconds)
            t[key] = fresh
            return fresh.value
        }
    }

    /// How many tokens were minted so far (tests, metrics).
    public var mintedCount: Int { minted.load(ordering: .relaxed) }

    private func epochSeconds() -> Int64 { Int64(now().timeIntervalSince1970.rounded(.down)) }

    private func mint(_ c: APNsCredential, iat: Int64) throws -> Token {
        minted.wrappingAdd(1, ordering: .relaxed)
        let value = try JWT.sign(
            header: ["kid": .string(c.keyId)], claims: ["iss": .string(c.teamId), "iat": .int(iat)],
            algorithm: .es256(c.privateKey))
        return Token(value: value, issuedAt: iat)
    }
}
