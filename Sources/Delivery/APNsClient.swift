import Foundation
import HTTP2
import LiveRelayCore

/// Sends one Live Activity push to APNs over HTTP/2 with token auth (SPEC §8):
/// `POST /3/device/<token>` with `authorization: bearer <JWT>` and `APNsPayload.headers`,
/// on a pool per (team, key, environment) — one connection carries one signing key only.
///
/// `403 ExpiredProviderToken` → a new JWT and exactly one retry; `403 UnrelatedKeyIdInToken` →
/// a fresh pool and exactly one retry; the answer to a retry is classified with
/// `isRetryAfterRefresh: true`, so the same error then fails instead of looping.
final class APNsClient: Sendable {
    struct PoolKey: Hashable, Sendable { let teamId: String; let keyId: String; let environment: String }

    let endpoints: ProviderEndpoints
    let tokens: APNsTokenCache
    let metrics: ProviderMetrics
    let pools = PoolSet<PoolKey>()

    init(endpoints: ProviderEndpoints, tokens: APNsTokenCache, metrics: ProviderMetrics) {
        self.endpoints = endpoints; self.tokens = tokens; self.metrics = metrics
    }

    /// The outcome plus the last HTTP status seen (for health reports).
    func send(_ push: OutgoingPush, body: [UInt8], credential: APNsCredential) -> PushResult {
        guard isHexToken(push.deviceToken) else {
            // Not a token APNs could know; answered locally exactly as APNs would.
            return .outcome(.tokenDead(providerStatus: 400, providerReason: "BadDeviceToken"))
        }
        let environment = push.environment == "production" ? "production" : "sandbox"
        let key = PoolKey(teamId: credential.teamId, keyId: credential.keyId, environment: environment)
        var jwt: String
        do { jwt = try tokens.token(for: credential) } catch {
            return .outcome(.failed(code: ProviderOutcome.Code.credentialsInvalid, providerStatus: 0, providerReason: "cannot sign provider token"))
        }
        var pool = pool(key)
        var first = attempt(push, body: body, jwt: jwt, pool: pool, isRetry: false)
        guard case .outcome(let outcome) = first else { return first }
        switch outcome {
        case .refreshCredentialAndRetryOnce:
            do { jwt = try tokens.refresh(for: credential, replacing: jwt) } catch {
                return .outcome(.failed(code: ProviderOutcome.Code.credentialsInvalid, providerStatus: 403, providerReason: "ExpiredProviderToken"))
            }
            first = attempt(push, body: body, jwt: jwt, pool: pool, isRetry: true)
        case .reconnectAndRetryOnce:
            pools.replace(key, old: pool, graceSeconds: endpoints.requestTimeoutSeconds + 1)
            pool = self.pool(key)
            first = attempt(push, body: body, jwt: jwt, pool: pool, isRetry: true)
        default:
            break
        }
        return first
    }

    private func pool(_ key: PoolKey) -> HTTP2ConnectionPool {
        pools.pool(key) {
            let base = key.environment == "production" ? endpoints.apnsProductionURL : endpoints.apnsSandboxURL
            return HTTP2ConnectionPool(configuration: endpoints.configuration(base), maxConnections: endpoints.maxConnectionsPerPool)
        }
    }

    private func attempt(_ push: OutgoingPush, body: [UInt8], jwt: String, pool: HTTP2ConnectionPool, isRetry: Bool) -> PushResult {
        var headers: [(String, String)] = [("authorization", "bearer " + jwt)]
        headers += APNsPayload.headers(topicBundleId: push.appId, priority: push.priority, expiration: push.expiration, apnsId: push.apnsId)
        headers.append(("content-type", "application/json"))
        let request = HTTP2Request(method: "POST", path: "/3/device/" + push.deviceToken, headers: headers, body: body)
        do {
            let response = try pool.send(request)
            let reason = response.status < 300 ? nil : ProviderOutcome.apnsReason(response.body)
            metrics.response("apns", response.status, reason)
            return .outcome(ProviderOutcome.apns(status: response.status, body: response.body,
                                                 apnsId: response.header("apns-id") ?? push.apnsId,
                                                 retryAfterHeader: response.header("retry-after"), isRetryAfterRefresh: isRetry))
        } catch let failure as HTTP2Failure {
            metrics.failure("apns", failure)
            return pushResult(failure)
        } catch {
            return .notProcessed("\(error)")
        }
    }

    func close() { pools.closeAll() }
}
