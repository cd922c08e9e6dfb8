import Foundation
import Crypto
import HTTP2
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics

/// The `PushSender` that talks to APNs and FCM (or the local sandbox): routes `ios` pushes to
/// APNs and `android` pushes to FCM with the tenant's credentials, keeps the HTTP/2 pools, the
/// APNs JWTs and the FCM access tokens, counts every provider response
/// (`liverelay_provider_responses_total{provider,status,reason}`) and reports credential health
/// (last success / last credential failure) to the credential source.
///
/// Thread-safe; `send` blocks the calling worker thread, `submit` does not (it returns once the
/// request is queued on a connection). Logs name tenants, operations and key
/// fingerprints, never device tokens, JWTs, access tokens or keys.
public final class ProviderSender: PushSender {
    let source: ProviderCredentialSource
    let endpoints: ProviderEndpoints
    let log: Logger
    let now: @Sendable () -> Date
    let metrics: ProviderMetrics
    /// The APNs provider-token cache (exposed for tests and diagnostics).
    public let apnsTokens: APNsTokenCache
    /// The FCM access-token cache (exposed for tests and diagnostics).
    public let fcmTokens: FCMAccessTokenCache
    let apns: APNsClient
    let fcm: FCMClient
    /// APNs channel management and broadcasts with the same credentials, JWT cache and metrics
    /// (docs/channels.md "APNs wire").
    public let channels: APNsChannelClient

    /// - Parameters:
    ///   - source: credentials per tenant (`DatabaseProviderCredentialSource` in production).
    ///   - endpoints: provider base URLs, extra CA file and timeouts.
    ///   - metrics: registry for `liverelay_provider_responses_total`.
    ///   - now: the clock for token ages (injected in tests).
    public init(
        source: ProviderCredentialSource, endpoints: ProviderEndpoints, metrics: MetricsRegistry, log: Logger,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.source = source; self.endpoints = endpoints; self.log = log; self.now = now
        self.metrics = ProviderMetrics(metrics)
        apnsTokens = APNsTokenCache(now: now)
        fcmTokens = FCMAccessTokenCache(endpoints: endpoints, metrics: self.metrics, now: now)
        apns = APNsClient(endpoints: endpoints, tokens: apnsTokens, metrics: self.metrics)
        fcm = FCMClient(endpoints: endpoints, tokens: fcmTokens, metrics: self.metrics)
        channels = APNsChannelClient(source: source, endpoints: endpoints, tokens: apnsTokens, metrics: self.metrics, now: now)
    }

    /// True: `submit` never waits for the provider.
    public var isEventDriven: Bool { true }

    /// Sends one push and blocks until its result (wrapper over `submit`).
    public func send(_ push: OutgoingPush) -> PushResult {
        waitForCompletion { done in submit(push, written: nil, completion: done) }
    }

    /// Sends one push without waiting for the provider (docs/delivery.md "Sending"): the
    /// tenant's credentials come from the source's cache (a miss reads the database on the
    /// caller's thread), the request goes to the pooled HTTP/2 connections, and `completion`
    /// runs on a connection thread with the classified result.
    public func submit(_ push: OutgoingPush, written: (@Sendable () -> Void)?, completion: @escaping @Sendable (PushResult) -> Void) {
        let creds: TenantProviderCredentials
        do { creds = try source.credentials(tenantId: push.tenantId) } catch {
            log.warning(
                "provider credentials unavailable",
                [
                    "tenant_id": .string(push.tenantId), "operation_id": .string(push.operationId),
                    "error": .string("\(error)")
                ])
            return completion(.notProcessed("provider credentials unavailable: \(error)"))
        }
        switch push.platform {
        case "ios":
            guard let body = push.apnsBody else {
                return completion(.outcome(.failed(code: ProviderOutcome.Code.rejected, providerStatus: 0, providerReason: "no APNs body")))
            }
            guard let credential = creds.apnsCredential(environment: push.environment, topic: push.appId) else {
                let why =
                    creds.unusable["apns_\(push.environment)"]
                    ?? (creds.apns.isEmpty
                        ? "the tenant has no APNs credential" : "no APNs credential lists topic \(push.appId)")
                return completion(.noCredentials(why))
            }
            apns.submit(push, body: body, credential: credential, written: written) { [self] result in
                reportHealth(
                    result, provider: "apns", tenantId: push.tenantId, environment: credential.environment,
                    fingerprint: credential.fingerprint, operationId: push.operationId)
                completion(result)
            }
        case "android":
            guard let body = push.fcmBody else {
                return completion(.outcome(.failed(code: ProviderOutcome.Code.rejected, providerStatus: 0, providerReason: "no FCM body")))
            }
            guard let credential = creds.fcm else {
                return completion(.noCredentials(creds.unusable["fcm"] ?? "the tenant has no FCM service account"))
            }
            fcm.submit(push, body: body, credential: credential, written: written) { [self] result in
                reportHealth(
                    result, provider: "fcm", tenantId: push.tenantId, environment: nil, fingerprint: credential.fingerprint,
                    operationId: push.operationId)
                completion(result)
            }
        default:
            completion(.outcome(.failed(code: ProviderOutcome.Code.rejected, providerStatus: 0, providerReason: "unknown platform")))
        }
    }

    /// Success: the provider accepted a request signed with the credential (accepted, or a
    /// dead-token answer, which also proves authentication). Failure: a credential error.
    private func reportHealth(
        _ result: PushResult, provider: String, tenantId: String, environment: String?, fingerprint: String,
        operationId: String
    ) {
        guard case .outcome(let outcome) = result else { return }
        let at = now()
        switch outcome {
        case .accepted, .tokenDead:
            source.report(
                ProviderCredentialHealthReport(
                    provider: provider, tenantId: tenantId, environment: environment,
                    fingerprint: fingerprint, at: at, failureReason: nil))
        case .failed(let code, let status, let reason) where code == ProviderOutcome.Code.credentialsInvalid:
            let text = "\(status) \(reason ?? "")".trimmingCharacters(in: .whitespaces)
            source.report(
                ProviderCredentialHealthReport(
                    provider: provider, tenantId: tenantId, environment: environment,
                    fingerprint: fingerprint, at: at, failureReason: text))
            log.warning(
                "provider rejected the credential",
                [
                    "tenant_id": .string(tenantId), "provider": .string(provider),
                    "fingerprint": .string(fingerprint), "operation_id": .string(operationId),
                    "provider_status": .int(Int64(status)), "provider_reason": .string(reason ?? "")
                ])
        default:
            break
        }
    }

    /// Closes every pooled connection; later sends fail `notProcessed`.
    public func close() {
        apns.close()
        fcm.close()
        channels.close()
        fcmTokens.close()
    }
}

extension ProviderSender {
    /// The production wiring: credentials from `db` (sealed under `kek`, cached 60 s, health
    /// flushed every 5 s by a started `DatabaseProviderCredentialSource`, which is returned so
    /// the caller can `stop()` it on shutdown).
    public static func make(
        db: Database, kek: AESGCM, endpoints: ProviderEndpoints, metrics: MetricsRegistry,
        log: Logger
    ) -> (sender: ProviderSender, credentials: DatabaseProviderCredentialSource) {
        let source = DatabaseProviderCredentialSource(db: db, kek: kek, log: log)
        source.start()
        return (ProviderSender(source: source, endpoints: endpoints, metrics: metrics, log: log), source)
    }
}
