import Foundation
import Crypto
import HTTP2
import JSON
import LiveRelayCore
import LiveRelayStore
import Metrics
import Locking

/// APNs broadcast channels (docs/channels.md "APNs wire"; Apple "Sending channel management
/// requests to APNs" and "Sending broadcast push notification requests to APNs"):
///
/// | call | request | success |
/// | --- | --- | --- |
/// | `createChannel` | `POST /1/apps/<bundle id>/channels` `{"message-storage-policy": 0\|1, "push-type": "LiveActivity"}` | `201`, header `apns-channel-id` |
/// | `readChannel` | `GET /1/apps/<bundle id>/channels`, header `apns-channel-id` | `200` `{"message-storage-policy", "push-type"}` |
/// | `deleteChannel` | `DELETE /1/apps/<bundle id>/channels`, header `apns-channel-id` | `204` (any 2xx) |
/// | `listChannels` | `GET /1/apps/<bundle id>/all-channels` | `200` `{"channels": [id…]}` |
/// | `submitBroadcast` | `POST /4/broadcasts/apps/<bundle id>` with `apns-channel-id`, `apns-push-type: liveactivity`, `apns-priority`, `apns-expiration`, `apns-request-id`; body `{"aps": …}` as an update/end | `200`, headers `apns-request-id`, `apns-unique-id` |
///
/// Management goes to `LIVERELAY_APNS_CHANNELS_{SANDBOX,PRODUCTION}_URL`, broadcasts to
/// `LIVERELAY_APNS_BROADCAST_{SANDBOX,PRODUCTION}_URL` (docs/configuration.md). Every request
/// carries `authorization: bearer <JWT>` from the same `APNsTokenCache` as device pushes (one
/// JWT per (team, key), Apple "Establishing a token-based connection to APNs") and an
/// `apns-request-id` (a fresh lowercase UUID per attempt unless the caller gives one). Pools are
/// keyed by (team, key, environment) per host: one connection carries one key only.
/// `403 ExpiredProviderToken` → a new JWT and exactly one retry; `403 UnrelatedKeyIdInToken` → a
/// fresh pool and exactly one retry; the same answer to the retry is final.
///
/// The tenant's APNs credential comes from `source` (`TenantProviderCredentials.apnsCredential`:
/// the key of `environment` listing the bundle id, else the other environment's). Thread-safe;
/// the `submit…`/callback forms never block (completion runs on a connection or global-queue
/// thread: keep it short); the plain forms block the caller until the answer or
/// `timeoutSeconds`. Logs and errors never contain JWTs or keys.
public final class APNsChannelClient: Sendable {
    /// One pool per host and signing key (fingerprint included), as `APNsClient`'s.
    struct PoolKey: Hashable, Sendable {
        let host: String; let teamId: String; let keyId: String; let fingerprint: String; let environment: String
    }

    let source: ProviderCredentialSource
    let endpoints: ProviderEndpoints
    /// The APNs provider-token cache (shared with `ProviderSender` when made by it).
    public let tokens: APNsTokenCache
    let metrics: ProviderMetrics
    let now: @Sendable () -> Date
    let pools = PoolSet<PoolKey>()

    /// A client with its own token cache (e.g. for an API node).
    /// - Parameters:
    ///   - source: the tenants' provider credentials.
    ///   - endpoints: channel and broadcast base URLs, extra CA, timeouts.
    ///   - metrics: registry for `liverelay_provider_responses_total` (`provider` `apns_channels` / `apns_broadcast`).
    ///   - now: clock for JWT ages and health reports.
    public convenience init(
        source: ProviderCredentialSource, endpoints: ProviderEndpoints, metrics: MetricsRegistry,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.init(source: source, endpoints: endpoints, tokens: APNsTokenCache(now: now), metrics: ProviderMetrics(metrics), now: now)
    }

    init(
        source: ProviderCredentialSource, endpoints: ProviderEndpoints, tokens: APNsTokenCache, metrics: ProviderMetrics,
        now: @escaping @Sendable () -> Date
    ) {
        self.source = source; self.endpoints = endpoints; self.tokens = tokens; self.metrics = metrics; self.now = now
    }

    // MARK: channel management

    /// Creates an APNs channel for `appId` in `environment` (`sandbox`|`production`) and calls
    /// `completion` with its `apns-channel-id`, or the refusal.
    public func createChannel(
        tenantId: String, appId: String, environment: String, storagePolicy: APNsMessageStoragePolicy,
        requestId: String = newRequestId(),
        completion: @escaping @Sendable (Result<APNsChannelCreated, APNsChannelError>) -> Void
    ) {
        let body = JSONValue.object(["message-storage-policy": .int(Int64(storagePolicy.rawValue)), "push-type": "LiveActivity"]).serialized()
        manage("POST", "channels", tenantId: tenantId, appId: appId, environment: environment, body: body, requestId: requestId) { result in
            completion(
                result.flatMap { r in
                    guard let id = r.header("apns-channel-id"), !id.isEmpty else {
                        return .failure(.invalidResponse(status: r.status, "the answer has no apns-channel-id header"))
                    }
                    return .success(APNsChannelCreated(channelId: id, apnsRequestId: r.header("apns-request-id") ?? requestId))
                })
        }
    }

    /// Reads one channel's settings.
    public func readChannel(
        tenantId: String, appId: String, environment: String, channelId: String, requestId: String = newRequestId(),
        completion: @escaping @Sendable (Result<APNsChannelInfo, APNsChannelError>) -> Void
    ) {
        manage("GET", "channels", tenantId: tenantId, appId: appId, environment: environment, channelId: channelId, requestId: requestId) { result in
            completion(
                result.flatMap { r in
                    guard let o = (try? JSONValue.parse(r.body, maxDepth: 8))?.objectValue,
                        let p = o["message-storage-policy"]?.intValue, let policy = APNsMessageStoragePolicy(rawValue: Int(p))
                    else {
                        return .failure(.invalidResponse(status: r.status, "the answer has no message-storage-policy 0 or 1"))
                    }
                    return .success(
                        APNsChannelInfo(
                            channelId: channelId, storagePolicy: policy, pushType: o["push-type"]?.stringValue ?? "",
                            apnsRequestId: r.header("apns-request-id") ?? requestId))
                })
        }
    }

    /// Deletes one channel: later broadcasts to it fail `ChannelNotRegistered`.
    public func deleteChannel(
        tenantId: String, appId: String, environment: String, channelId: String, requestId: String = newRequestId(),
        completion: @escaping @Sendable (Result<APNsChannelDeleted, APNsChannelError>) -> Void
    ) {
        manage("DELETE", "channels", tenantId: tenantId, appId: appId, environment: environment, channelId: channelId, requestId: requestId) {
            result in
            completion(result.map { r in APNsChannelDeleted(channelId: channelId, apnsRequestId: r.header("apns-request-id") ?? requestId) })
        }
    }

    /// Lists every channel id of `appId` in `environment`.
    public func listChannels(
        tenantId: String, appId: String, environment: String, requestId: String = newRequestId(),
        completion: @escaping @Sendable (Result<APNsChannelList, APNsChannelError>) -> Void
    ) {
        manage("GET", "all-channels", tenantId: tenantId, appId: appId, environment: environment, requestId: requestId) { result in
            completion(
                result.flatMap { r in
                    guard let o = (try? JSONValue.parse(r.body, maxDepth: 8))?.objectValue, let list = o["channels"]?.arrayValue else {
                        return .failure(.invalidResponse(status: r.status, "the answer has no channels array"))
                    }
                    return .success(
                        APNsChannelList(channelIds: list.compactMap(\.stringValue), apnsRequestId: r.header("apns-request-id") ?? requestId))
                })
        }
    }

    /// Blocking `createChannel` for a request path: waits at most `timeoutSeconds` (seconds),
    /// then answers `.possiblyProcessed` (the channel may exist: delete or list to clean up).
    public func createChannel(
        tenantId: String, appId: String, environment: String, storagePolicy: APNsMessageStoragePolicy,
        timeoutSeconds: Double, requestId: String = newRequestId()
    ) -> Result<APNsChannelCreated, APNsChannelError> {
        wait(timeoutSeconds) { done in
            createChannel(
                tenantId: tenantId, appId: appId, environment: environment, storagePolicy: storagePolicy, requestId: requestId, completion: done)
        }
    }

    /// Blocking `readChannel` (at most `timeoutSeconds`).
    public func readChannel(
        tenantId: String, appId: String, environment: String, channelId: String,
        timeoutSeconds: Double
    ) -> Result<APNsChannelInfo, APNsChannelError> {
        wait(timeoutSeconds) { done in readChannel(tenantId: tenantId, appId: appId, environment: environment, channelId: channelId, completion: done)
        }
    }

    /// Blocking `deleteChannel` (at most `timeoutSeconds`).
    public func deleteChannel(
        tenantId: String, appId: String, environment: String, channelId: String,
        timeoutSeconds: Double
    ) -> Result<APNsChannelDeleted, APNsChannelError> {
        wait(timeoutSeconds) { done in
            deleteChannel(tenantId: tenantId, appId: appId, environment: environment, channelId: channelId, completion: done)
        }
    }

    /// Blocking `listChannels` (at most `timeoutSeconds`).
    public func listChannels(
        tenantId: String, appId: String, environment: String,
        timeoutSeconds: Double
    ) -> Result<APNsChannelList, APNsChannelError> {
        wait(timeoutSeconds) { done in listChannels(tenantId: tenantId, appId: appId, environment: environment, completion: done) }
    }

    // MARK: broadcasts

    /// Sends one broadcast without blocking (the dispatcher's event-driven path, like
    /// `ProviderSender.submit`). `written`: the first attempt's HEADERS were written.
    /// `completion` gets the classified result (`ProviderOutcome.apnsBroadcast`) with the
    /// request id, APNs' `apns-unique-id` and the reason.
    public func submitBroadcast(
        _ b: OutgoingBroadcast, written: (@Sendable () -> Void)? = nil,
        completion: @escaping @Sendable (APNsBroadcastResult) -> Void
    ) {
        let credential: APNsCredential
        switch credentialFor(tenantId: b.tenantId, appId: b.appId, environment: b.environment) {
        case .failure(let e):
            let result: PushResult
            switch e {
            case .noCredentials(let why): result = .noCredentials(why)
            case .notProcessed(let why): result = .notProcessed(why)
            default: result = .noCredentials("\(e)")
            }
            return completion(APNsBroadcastResult(result: result, status: nil, apnsRequestId: b.apnsRequestId, apnsUniqueId: nil, reason: nil))
        case .success(let c): credential = c
        }
        var headers: [(String, String)] = [
            ("apns-channel-id", b.channelId), ("apns-push-type", "liveactivity"),
            ("apns-priority", String(b.priority)), ("apns-expiration", String(b.expiration)),
            ("apns-request-id", b.apnsRequestId)
        ]
        headers.append(("content-type", "application/json"))
        let request = HTTP2Request(method: "POST", path: "/4/broadcasts/apps/\(b.appId)", headers: headers, body: b.body)
        let base = b.environment == "production" ? endpoints.apnsBroadcastProductionURL : endpoints.apnsBroadcastSandboxURL
        let unsigned = APNsBroadcastResult(
            result: .outcome(
                .failed(
                    code: ProviderOutcome.Code.credentialsInvalid, providerStatus: 0,
                    providerReason: "cannot sign provider token")),
            status: nil, apnsRequestId: b.apnsRequestId, apnsUniqueId: nil, reason: nil)
        perform(
            request, base: base, credential: credential, provider: "apns_broadcast", tenantId: b.tenantId, written: written,
            unsigned: unsigned
        ) { answer, isRetry in
            switch answer {
            case .success(let r):
                let unique = r.header("apns-unique-id")
                let requestId = r.header("apns-request-id") ?? b.apnsRequestId
                let outcome = ProviderOutcome.apnsBroadcast(
                    status: r.status, body: r.body, providerId: unique ?? requestId,
                    retryAfterHeader: r.header("retry-after"), isRetryAfterRefresh: isRetry)
                return (
                    outcome,
                    APNsBroadcastResult(
                        result: .outcome(outcome), status: r.status, apnsRequestId: requestId, apnsUniqueId: unique,
                        reason: r.status < 300 ? nil : ProviderOutcome.apnsReason(r.body))
                )
            case .failure(let f):
                return (nil, APNsBroadcastResult(result: pushResult(f), status: nil, apnsRequestId: b.apnsRequestId, apnsUniqueId: nil, reason: nil))
            }
        } completion: {
            completion($0)
        }
    }

    /// Sends one broadcast and blocks until its result (wrapper over `submitBroadcast`).
    public func sendBroadcast(_ b: OutgoingBroadcast) -> APNsBroadcastResult {
        waitForCompletion { done in submitBroadcast(b, completion: done) }
    }

    /// Closes every pooled connection; later requests fail `notProcessed`.
    public func close() { pools.closeAll() }

    /// A fresh `apns-request-id`: a lowercase canonical UUID.
    public static func newRequestId() -> String { SecureRandom.uuidV4() }

    // MARK: internals

    private func credentialFor(tenantId: String, appId: String, environment: String) -> Result<APNsCredential, APNsChannelError> {
        let creds: TenantProviderCredentials
        do { creds = try source.credentials(tenantId: tenantId) } catch {
            return .failure(.notProcessed("provider credentials unavailable: \(error)"))
        }
        guard let c = creds.apnsCredential(environment: environment, topic: appId) else {
            let env = environment == "production" ? "production" : "sandbox"
            return .failure(
                .noCredentials(
                    creds.unusable["apns_\(env)"]
                        ?? (creds.apns.isEmpty
                            ? "the tenant has no APNs credential" : "no APNs credential lists topic \(appId)")))
        }
        return .success(c)
    }

    private func manage(
        _ method: String, _ resource: String, tenantId: String, appId: String, environment: String, channelId: String? = nil,
        body: [UInt8] = [], requestId: String,
        completion: @escaping @Sendable (Result<HTTP2Response, APNsChannelError>) -> Void
    ) {
        let path = "/1/apps/\(appId)/\(resource)"
        let credential: APNsCredential
        switch credentialFor(tenantId: tenantId, appId: appId, environment: environment) {
        case .failure(let e): return completion(.failure(e))
        case .success(let c): credential = c
        }
        var headers: [(String, String)] = [("apns-request-id", requestId)]
        if let channelId { headers.append(("apns-channel-id", channelId)) }
        if !body.isEmpty { headers.append(("content-type", "application/json")) }
        let request = HTTP2Request(method: method, path: path, headers: headers, body: body)
        let base = environment == "production" ? endpoints.apnsChannelsProductionURL : endpoints.apnsChannelsSandboxURL
        perform(
            request, base: base, credential: credential, provider: "apns_channels", tenantId: tenantId, written: nil,
            unsigned: .failure(.noCredentials("the stored APNs key cannot sign a provider token"))
        ) { answer, isRetry in
            switch answer {
            case .success(let r) where (200..<300).contains(r.status):
                return (.accepted(providerId: nil), .success(r))
            case .success(let r):
                let outcome = ProviderOutcome.apnsBroadcast(
                    status: r.status, body: r.body, retryAfterHeader: r.header("retry-after"),
                    isRetryAfterRefresh: isRetry)
                return (
                    outcome,
                    .failure(
                        .provider(
                            APNsProviderRefusal(
                                status: r.status, reason: ProviderOutcome.apnsReason(r.body),
                                apnsRequestId: r.header("apns-request-id") ?? requestId,
                                retryAfterSeconds: ProviderOutcome.retryAfterSeconds(r.header("retry-after")))))
                )
            case .failure(let f):
                switch f {
                case .notProcessed(let why): return (nil, .failure(.notProcessed(why)))
                case .tls(let why): return (nil, .failure(.notProcessed("TLS: \(why)")))
                case .possiblyProcessed(let why): return (nil, .failure(.possiblyProcessed(why)))
                }
            }
        } completion: {
            completion($0)
        }
    }

    /// One request with the JWT of `credential`, plus at most one retry after
    /// `ExpiredProviderToken` (new JWT) or `UnrelatedKeyIdInToken` (new pool). `classify` turns
    /// an answer into (its outcome, the caller's result); the retry decision reads the outcome.
    /// `unsigned`: the result when no JWT can be signed (nothing is sent).
    private func perform<T: Sendable>(
        _ request: HTTP2Request, base: URL, credential: APNsCredential, provider: String, tenantId: String,
        written: (@Sendable () -> Void)?, unsigned: T,
        classify: @escaping @Sendable (Result<HTTP2Response, HTTP2Failure>, Bool) -> (ProviderOutcome?, T),
        completion: @escaping @Sendable (T) -> Void
    ) {
        let key = PoolKey(
            host: base.absoluteString, teamId: credential.teamId, keyId: credential.keyId,
            fingerprint: credential.fingerprint, environment: credential.environment)
        let jwt: String
        do { jwt = try tokens.token(for: credential) } catch { return completion(unsigned) }
        let pool = self.pool(key, base)
        attempt(request, jwt: jwt, pool: pool, provider: provider, written: written) { [self] first in
            let (outcome, value) = classify(first, false)
            switch outcome {
            case .refreshCredentialAndRetryOnce:
                DispatchQueue.global().async { [self] in
                    guard let fresh = try? tokens.refresh(for: credential, replacing: jwt) else {
                        // No new token: the expired-token answer is final (classified as a retry's).
                        return finish(classify(first, true), credential: credential, provider: provider, tenantId: tenantId, completion: completion)
                    }
                    attempt(request, jwt: fresh, pool: pool, provider: provider, written: nil) { [self] second in
                        finish(classify(second, true), credential: credential, provider: provider, tenantId: tenantId, completion: completion)
                    }
                }
            case .reconnectAndRetryOnce:
                DispatchQueue.global().async { [self] in
                    pools.replace(key, old: pool, graceSeconds: endpoints.requestTimeoutSeconds + 1)
                    attempt(request, jwt: jwt, pool: self.pool(key, base), provider: provider, written: nil) { [self] second in
                        finish(classify(second, true), credential: credential, provider: provider, tenantId: tenantId, completion: completion)
                    }
                }
            default:
                finish((outcome, value), credential: credential, provider: provider, tenantId: tenantId, completion: completion)
            }
        }
    }

    /// Reports credential health as `ProviderSender` does (success: APNs authenticated the
    /// request; failure: a credential error), then completes.
    private func finish<T>(
        _ r: (ProviderOutcome?, T), credential: APNsCredential, provider: String, tenantId: String,
        completion: @escaping @Sendable (T) -> Void
    ) {
        switch r.0 {
        case .accepted?, .tokenDead?:
            source.report(
                ProviderCredentialHealthReport(
                    provider: "apns", tenantId: tenantId, environment: credential.environment,
                    fingerprint: credential.fingerprint, at: now(), failureReason: nil))
        case .failed(let code, let status, let reason)? where code == ProviderOutcome.Code.credentialsInvalid:
            source.report(
                ProviderCredentialHealthReport(
                    provider: "apns", tenantId: tenantId, environment: credential.environment,
                    fingerprint: credential.fingerprint, at: now(),
                    failureReason: "\(status) \(reason ?? "")".trimmingCharacters(in: .whitespaces)))
        default:
            break
        }
        completion(r.1)
    }

    private func attempt(
        _ request: HTTP2Request, jwt: String, pool: HTTP2ConnectionPool, provider: String, written: (@Sendable () -> Void)?,
        completion: @escaping @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void
    ) {
        var r = request
        r.headers.insert(("authorization", "bearer " + jwt), at: 0)
        let metrics = self.metrics
        pool.submit(r, onWritten: written) { result in
            switch result {
            case .success(let response):
                metrics.response(provider, response.status, response.status < 300 ? nil : ProviderOutcome.apnsReason(response.body))
            case .failure(let failure):
                metrics.failure(provider, failure)
            }
            completion(result)
        }
    }

    private func pool(_ key: PoolKey, _ base: URL) -> HTTP2ConnectionPool {
        pools.pool(key) { HTTP2ConnectionPool(configuration: endpoints.configuration(base), maxConnections: endpoints.maxConnectionsPerPool) }
    }

    private func wait<T: Sendable>(
        _ timeoutSeconds: Double,
        _ start: (@escaping @Sendable (Result<T, APNsChannelError>) -> Void) -> Void
    ) -> Result<T, APNsChannelError> {
        let done = DispatchSemaphore(value: 0)
        let box = Locked<Result<T, APNsChannelError>?>(nil)
        start { v in
            box.withLock { if $0 == nil { $0 = v } }
            done.signal()
        }
        if done.wait(timeout: .now() + max(0, timeoutSeconds)) == .timedOut {
            box.withLock { if $0 == nil { $0 = .failure(.possiblyProcessed("no answer from APNs within \(timeoutSeconds) s")) } }
        }
        return box.withLock { $0! }
    }
}

/// APNs `message-storage-policy` of a channel (Apple "Sending channel management requests to
/// APNs"): `0` No Message Stored (broadcasts must carry `apns-expiration: 0`), `1` Most Recent
/// Message Stored. docs/channels.md `storage_policy` `none` / `most_recent`.
public enum APNsMessageStoragePolicy: Int, Sendable, Equatable, CaseIterable {
    case noMessageStored = 0
    case mostRecentMessageStored = 1

    /// From the API's `storage_policy` (`none` | `most_recent`); nil for anything else.
    public init?(apiValue: String) {
        switch apiValue {
        case "none": self = .noMessageStored
        case "most_recent": self = .mostRecentMessageStored
        default: return nil
        }
    }

    /// The API's `storage_policy` value.
    public var apiValue: String { self == .noMessageStored ? "none" : "most_recent" }
}

/// A created channel: APNs' `apns-channel-id` (base64 text, stored as given) and the request id.
public struct APNsChannelCreated: Sendable, Equatable {
    public let channelId: String
    public let apnsRequestId: String
}

/// One channel's settings as APNs reports them.
public struct APNsChannelInfo: Sendable, Equatable {
    public let channelId: String
    public let storagePolicy: APNsMessageStoragePolicy
    /// `push-type` (`LiveActivity`).
    public let pushType: String
    public let apnsRequestId: String
}

/// A deleted channel.
public struct APNsChannelDeleted: Sendable, Equatable {
    public let channelId: String
    public let apnsRequestId: String
}

/// Every channel id of an app in one environment.
public struct APNsChannelList: Sendable, Equatable {
    public let channelIds: [String]
    public let apnsRequestId: String
}

/// APNs answered a channel request with an error status (Apple "Handling error responses from
/// Apple Push Notification service"): `reason` is the body's `reason` (e.g.
/// `BadMessageStoragePolicy`, `ChannelNotRegistered`, `InvalidProviderToken`).
public struct APNsProviderRefusal: Sendable, Equatable {
    /// HTTP `:status` (4xx/5xx).
    public let status: Int
    public let reason: String?
    /// `apns-request-id` of the answer (or of the request when APNs did not echo it).
    public let apnsRequestId: String
    /// `Retry-After` in seconds, when APNs sent one.
    public let retryAfterSeconds: Double?
}

/// Why a channel-management request failed.
public enum APNsChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    /// APNs refused it (the API answers `502 PROVIDER_ERROR` with `provider_status`/`provider_reason`).
    case provider(APNsProviderRefusal)
    /// Provably not processed (connection or TLS failure before sending, credentials unreadable): safe to resend.
    case notProcessed(String)
    /// May have been processed (connection lost after sending, timeout): a created channel may exist.
    case possiblyProcessed(String)
    /// The tenant has no (usable) APNs credential for the bundle id.
    case noCredentials(String)
    /// A 2xx answer without what it must carry (e.g. no `apns-channel-id`).
    case invalidResponse(status: Int, String)

    /// `details.provider_status`: the HTTP status APNs answered, 0 when there was no answer.
    public var providerStatus: Int {
        switch self {
        case .provider(let r): return r.status
        case .invalidResponse(let s, _): return s
        default: return 0
        }
    }

    /// `details.provider_reason`: APNs' reason, or a short description of why there was no answer.
    public var providerReason: String {
        switch self {
        case .provider(let r): return r.reason ?? ""
        case .notProcessed: return "unreachable"
        case .possiblyProcessed: return "no_answer"
        case .noCredentials: return "no_credentials"
        case .invalidResponse: return "invalid_response"
        }
    }

    /// True when resending may succeed (transport failures, `429`, `5xx`).
    public var isRetryable: Bool {
        switch self {
        case .notProcessed, .possiblyProcessed: return true
        case .provider(let r): return r.status == 429 || r.status >= 500
        case .noCredentials, .invalidResponse: return false
        }
    }

    public var description: String {
        switch self {
        case .provider(let r): return "APNs answered \(r.status) \(r.reason ?? "")".trimmingCharacters(in: .whitespaces)
        case .notProcessed(let why): return "not sent: \(why)"
        case .possiblyProcessed(let why): return "outcome unknown: \(why)"
        case .noCredentials(let why): return why
        case .invalidResponse(let s, let why): return "APNs answered \(s) but \(why)"
        }
    }
}

/// One broadcast attempt (docs/channels.md "APNs wire"; Apple "Sending broadcast push
/// notification requests to APNs").
public struct OutgoingBroadcast: Sendable {
    public let tenantId: String
    /// The channel operation it serves (logs).
    public let channelOperationId: String
    /// `sandbox` or `production`: which broadcast host.
    public let environment: String
    /// Bundle id (path `/4/broadcasts/apps/<appId>`; no topic header, no `.push-type` suffix).
    public let appId: String
    /// `apns-channel-id`.
    public let channelId: String
    /// `{"aps": …}` exactly as an update/end to a device (`DeliveryPayload.apns`), size-checked.
    public let body: [UInt8]
    /// `apns-priority`: 10, 5 or 1.
    public let priority: Int
    /// `apns-expiration` in whole epoch seconds; `0` for a channel with storage policy none
    /// (see `expirationHeader`).
    public let expiration: Int64
    /// `apns-request-id` of this attempt (a lowercase UUID; new per attempt).
    public let apnsRequestId: String

    public init(
        tenantId: String, channelOperationId: String, environment: String, appId: String, channelId: String, body: [UInt8],
        priority: Int, expiration: Int64, apnsRequestId: String = APNsChannelClient.newRequestId()
    ) {
        self.tenantId = tenantId; self.channelOperationId = channelOperationId; self.environment = environment; self.appId = appId
        self.channelId = channelId; self.body = body; self.priority = priority; self.expiration = expiration; self.apnsRequestId = apnsRequestId
    }

    /// The `apns-expiration` value: `0` for `noMessageStored` (APNs stores nothing), else
    /// `expiresAt` or now + `defaultSeconds` (`LIVERELAY_DEFAULT_EXPIRATION_SECONDS`), whole
    /// epoch seconds rounded down.
    public static func expirationHeader(storagePolicy: APNsMessageStoragePolicy, expiresAt: Date?, now: Date, defaultSeconds: Int) -> Int64 {
        if storagePolicy == .noMessageStored { return 0 }
        return Timestamp.epochSeconds(expiresAt ?? now.addingTimeInterval(TimeInterval(defaultSeconds)))
    }
}

/// What came of one broadcast attempt.
public struct APNsBroadcastResult: Sendable, Equatable {
    /// Classified as for a device push (`ProviderOutcome.apnsBroadcast`: `tokenDead` = the
    /// channel is gone), or a transport/credential result; feed it to `DispatchPush.attemptResult`.
    public let result: PushResult
    /// HTTP status, nil when APNs did not answer.
    public let status: Int?
    /// `apns-request-id` (APNs' echo, else the one sent).
    public let apnsRequestId: String
    /// `apns-unique-id` of an accepted broadcast.
    public let apnsUniqueId: String?
    /// APNs' `reason` of a refusal.
    public let reason: String?

    /// True when APNs says the channel does not exist or its id is bad (→ channel `ended`, reason `channel_invalid`).
    public var isChannelInvalid: Bool { status.map { ProviderOutcome.isChannelInvalid(status: $0, reason: reason) } ?? false }
}
