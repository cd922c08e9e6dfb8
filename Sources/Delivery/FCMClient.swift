import Foundation
import HTTP2
import LiveRelayCore

/// Sends one data message through FCM HTTP v1 (docs/providers.md):
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

    /// Sends without blocking, neither on the provider's answer nor on the access token: a
    /// cold or expired token is fetched on a global queue and the message goes out when it
    /// arrives (`FCMAccessTokenCache.accessToken(_:replacing:completion:)`), so the caller's
    /// thread (a dispatcher submitter, shared by every tenant) never waits for Google. After a
    /// `401` a new access token is fetched the same way, never on a connection's I/O thread,
    /// and the message is retried once. `written`: the first attempt's HEADERS were written.
    func submit(
        _ push: OutgoingPush, body: [UInt8], credential: FCMCredential, written: (@Sendable () -> Void)?,
        completion: @escaping @Sendable (PushResult) -> Void
    ) {
        tokens.accessToken(credential) { [self] got in
            let token: String
            switch got {
            case .success(let t): token = t
            case .failure(let error): return completion(tokenFailure(error))
            }
            attempt(body, credential: credential, token: token, isRetry: false, written: written) { [self] first in
                guard case .outcome(.refreshCredentialAndRetryOnce) = first else { return completion(first) }
                DispatchQueue.global().async { [self] in  // off the connection's I/O thread, whatever the cache does
                    tokens.accessToken(credential, replacing: token) { [self] fresh in
                        switch fresh {
                        case .success(let t): attempt(body, credential: credential, token: t, isRetry: true, written: nil, completion: completion)
                        case .failure(let error): completion(tokenFailure(error))
                        }
                    }
                }
            }
        }
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
            return .outcome(
                .failed(
                    code: ProviderOutcome.Code.credentialsInvalid, providerStatus: status,
                    providerReason: "oauth: " + (error.map { String($0.prefix(100)) } ?? "rejected")))
        }
    }

    private func attempt(
        _ body: [UInt8], credential: FCMCredential, token: String, isRetry: Bool, written: (@Sendable () -> Void)?,
        completion: @escaping @Sendable (PushResult) -> Void
    ) {
        let pool = pools.pool("fcm") {
            HTTP2ConnectionPool(configuration: endpoints.configuration(endpoints.fcmURL), maxConnections: endpoints.maxConnectionsPerPool)
        }
        let request = HTTP2Request(
            method: "POST", path: "/v1/projects/\(credential.projectId)/messages:send",
            headers: [("authorization", "Bearer " + token), ("content-type", "application/json; charset=utf-8")],
            body: body)
        let metrics = self.metrics
        pool.submit(request, onWritten: written) { result in
            switch result {
            case .success(let response):
                let reason = response.status < 300 ? nil : FCMErrorBody(body: response.body).reason
                metrics.response("fcm", response.status, reason)
                completion(
                    .outcome(
                        ProviderOutcome.fcm(
                            status: response.status, body: response.body,
                            retryAfterHeader: response.header("retry-after"), isRetryAfterRefresh: isRetry)))
            case .failure(let failure):
                metrics.failure("fcm", failure)
                completion(pushResult(failure))
            }
        }
    }

    func close() { pools.closeAll() }
}
