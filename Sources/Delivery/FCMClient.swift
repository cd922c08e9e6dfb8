import Foundation
import HTTP2
import LiveRelayCore

/// Sends one data message through FCM HTTP v1 (SPEC §8):
/// `POST <LIVERELAY_FCM_URL>/v1/projects/<project>/messages:send` with
/// `authorization: Bearer <OAuth2 access token>`; a `401` → one new access token and exactly one
/// retry (answer classified with `isRetryAfterRefresh: true`). A token endpoint failure means
/// the message was never sent: transport problems → `notProcessed`, `429`/`5xx` → `retry`, any
/// other refusal → `failed(PROVIDER_CREDENTIALS_INVALID)`.
final class FCMClient: Sendable {
    let endpoints: ProviderEndpoints
    let tokens: FCMAccessTokenCache
    let metrics: ProviderMetrics
    let pools = PoolSet<String>()

    init(endpoints: ProviderEndpoints, tokens: FCMAccessTokenCache, metrics: ProviderMetrics) {
        self.endpoints = endpoints; self.tokens = tokens; self.metrics = metrics
    }

    func send(_ push: OutgoingPush, body: [UInt8], credential: FCMCredential) -> PushResult {
        var token: String
        do { token = try tokens.accessToken(credential) } catch { return tokenFailure(error) }
        let first = attempt(body, credential: credential, token: token, isRetry: false)
        guard case .outcome(.refreshCredentialAndRetryOnce) = first else { return first }
        do { token = try tokens.accessToken(credential, replacing: token) } catch { return tokenFailure(error) }
        return attempt(body, credential: credential, token: token, isRetry: true)
    }

    private func tokenFailure(_ failure: FCMAccessTokenCache.Failure) -> PushResult {
        switch failure {
        case .transport(let f):
            // Whatever became of the token request, the message itself was not sent.
            switch f {
            case .notProcessed(let r), .possiblyProcessed(let r): return .notProcessed("OAuth token endpoint: \(r)")
            case .tls(let r): return .notProcessed("OAuth token endpoint TLS: \(r)")
            }
        case .rejected(let status, let error, let retryAfter):
            if status == 429 || (500..<600).contains(status) {
                return .outcome(.retry(after: ProviderOutcome.retryAfterSeconds(retryAfter)))
            }
            return .outcome(.failed(code: ProviderOutcome.Code.credentialsInvalid, providerStatus: status,
                                    providerReason: "oauth: " + (error.map { String($0.prefix(100)) } ?? "rejected")))
        }
    }

    private func attempt(_ body: [UInt8], credential: FCMCredential, token: String, isRetry: Bool) -> PushResult {
        let pool = pools.pool("fcm") {
            HTTP2ConnectionPool(configuration: endpoints.configuration(endpoints.fcmURL), maxConnections: endpoints.maxConnectionsPerPool)
        }
        let request = HTTP2Request(method: "POST", path: "/v1/projects/\(credential.projectId)/messages:send",
                                   headers: [("authorization", "Bearer " + token), ("content-type", "application/json; charset=utf-8")],
                                   body: body)
        do {
            let response = try pool.send(request)
            let reason = response.status < 300 ? nil : FCMErrorBody(body: response.body).reason
            metrics.response("fcm", response.status, reason)
            return .outcome(ProviderOutcome.fcm(status: response.status, body: response.body,
                                                retryAfterHeader: response.header("retry-after"), isRetryAfterRefresh: isRetry))
        } catch let failure as HTTP2Failure {
            metrics.failure("fcm", failure)
            return pushResult(failure)
        } catch {
            return .notProcessed("\(error)")
        }
    }

    func close() { pools.closeAll() }
}
