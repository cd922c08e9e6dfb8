import Foundation
import HTTP2
import LiveRelayCore

/// Sends one Live Activity push to APNs over HTTP/2 with token auth (docs/providers.md):
/// `POST /3/device/<token>` with `authorization: bearer <JWT>` and `APNsPayload.headers`,
/// on a pool per (team, key id, signing key's fingerprint, environment): one connection carries
/// one signing key only, and no tenant's key shares another tenant's connections. APNs counts
/// provider-token changes per connection (`429 TooManyProviderTokenUpdates`), so a tenant that
/// stored someone else's team and key id with its own key must not alternate tokens on their
/// connections (docs/providers.md "APNs").
///
/// `403 ExpiredProviderToken` → a new JWT and exactly one retry; `403 UnrelatedKeyIdInToken` →
/// a fresh pool and exactly one retry; the answer to a retry is classified with
/// `isRetryAfterRefresh: true`, so the same error then fails instead of looping.
final class APNsClient: Sendable {
    struct PoolKey: Hashable, Sendable { let teamId: String; let keyId: String; let fingerprint: String; let environment: String }
    let pools = PoolSet<PoolKey>()

    let endpoints: ProviderEndpoints
    let tokens: APNsTokenCache
    let metrics: ProviderMetrics

    init(endpoints: ProviderEndpoints, tokens: APNsTokenCache, metrics: ProviderMetrics) {
        self.endpoints = endpoints; self.tokens = tokens; self.metrics = metrics
    }

    /// Sends without blocking; `completion` gets the outcome after at most one refresh/retry
    /// (see the type). The retry's token refresh or pool swap runs on a global queue, never on
    /// a connection's I/O thread. `written`: the first attempt's HEADERS were written.
    func submit(
        _ push: OutgoingPush, body: [UInt8], credential: APNsCredential, written: (@Sendable () -> Void)?,
        completion: @escaping @Sendable (PushResult) -> Void
    ) {
        guard isHexToken(push.deviceToken) else {
            // Not a token APNs could know; answered locally exactly as APNs would.
            return completion(.outcome(.tokenDead(providerStatus: 400, providerReason: "BadDeviceToken")))
        }
        let environment = push.environment == "production" ? "production" : "sandbox"
        let key = PoolKey(
            teamId: credential.teamId, keyId: credential.keyId, fingerprint: credential.fingerprint, environment: environment)
        let jwt: String
        do { jwt = try tokens.token(for: credential) } catch {
            return completion(
                .outcome(
                    .failed(
                        code: ProviderOutcome.Code.credentialsInvalid, providerStatus: 0,
                        providerReason: "cannot sign provider token")))
        }
        let pool = pool(key)
        attempt(push, body: body, jwt: jwt, pool: pool, isRetry: false, written: written) { [self] first in
            guard case .outcome(let outcome) = first else { return completion(first) }
            switch outcome {
            case .refreshCredentialAndRetryOnce:
                DispatchQueue.global().async { [self] in
                    let fresh: String
                    do { fresh = try tokens.refresh(for: credential, replacing: jwt) } catch {
                        return completion(
                            .outcome(
                                .failed(
                                    code: ProviderOutcome.Code.credentialsInvalid, providerStatus: 403,
                                    providerReason: "ExpiredProviderToken")))
                    }
                    attempt(push, body: body, jwt: fresh, pool: pool, isRetry: true, written: nil, completion: completion)
                }
            case .reconnectAndRetryOnce:
                DispatchQueue.global().async { [self] in
                    pools.replace(key, old: pool, graceSeconds: endpoints.requestTimeoutSeconds + 1)
                    attempt(push, body: body, jwt: jwt, pool: self.pool(key), isRetry: true, written: nil, completion: completion)
                }
            default:
                completion(first)
            }
        }
    }

    private func pool(_ key: PoolKey) -> HTTP2ConnectionPool {
        pools.pool(key) {
            let base = key.environment == "production" ? endpoints.apnsProductionURL : endpoints.apnsSandboxURL
            return HTTP2ConnectionPool(configuration: endpoints.configuration(base), maxConnections: endpoints.maxConnectionsPerPool)
        }
    }

    private func attempt(
        _ push: OutgoingPush, body: [UInt8], jwt: String, pool: HTTP2ConnectionPool, isRetry: Bool,
        written: (@Sendable () -> Void)?, completion: @escaping @Sendable (PushResult) -> Void
    ) {
        var headers: [(String, String)] = [("authorization", "bearer " + jwt)]
        headers += APNsPayload.headers(topicBundleId: push.appId, priority: push.priority, expiration: push.expiration, apnsId: push.apnsId)
        headers.append(("content-type", "application/json"))
        let request = HTTP2Request(method: "POST", path: "/3/device/" + push.deviceToken, headers: headers, body: body)
        let metrics = self.metrics
        pool.submit(request, onWritten: written) { result in
            switch result {
            case .success(let response):
                let reason = response.status < 300 ? nil : ProviderOutcome.apnsReason(response.body)
                metrics.response("apns", response.status, reason)
                completion(
                    .outcome(
                        ProviderOutcome.apns(
                            status: response.status, body: response.body,
                            apnsId: response.header("apns-id") ?? push.apnsId,
                            retryAfterHeader: response.header("retry-after"), isRetryAfterRefresh: isRetry)))
            case .failure(let failure):
                metrics.failure("apns", failure)
                completion(pushResult(failure))
            }
        }
    }

    func close() { pools.closeAll() }
}
