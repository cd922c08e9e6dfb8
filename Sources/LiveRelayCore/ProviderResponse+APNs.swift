import Foundation
import JSON

extension ProviderOutcome {
    /// The `reason` of an APNs error body `{"reason": "BadDeviceToken", "timestamp"?: ms}`;
    /// nil for an empty or malformed body.
    public static func apnsReason(_ body: [UInt8]) -> String? {
        jsonObject(body)?["reason"]?.stringValue
    }

    /// Classifies an APNs response (docs/providers.md "Responses"; Apple "Handling notification
    /// responses from APNs").
    ///
    /// | status | reason | outcome |
    /// | --- | --- | --- |
    /// | 2xx | – | `accepted(providerId: apnsId)` |
    /// | 410 | `Unregistered`, `ExpiredToken`, any | `tokenDead` |
    /// | 400 | `BadDeviceToken` | `tokenDead` |
    /// | 400 | `IdleTimeout` | `retry` (APNs did not process the request) |
    /// | 400 | others (`BadTopic`, `TopicDisallowed`, `BadPriority`, `BadExpirationDate`, `DeviceTokenNotForTopic`, …) | `failed(PROVIDER_REJECTED)` |
    /// | 403 | `ExpiredProviderToken` | `refreshCredentialAndRetryOnce` |
    /// | 403 | `UnrelatedKeyIdInToken` | `reconnectAndRetryOnce` |
    /// | 403 | others (`InvalidProviderToken`, `MissingProviderToken`, `BadCertificate`, `BadCertificateEnvironment`, `BadEnvironmentKeyInToken`, `Forbidden`, none) | `failed(PROVIDER_CREDENTIALS_INVALID)` |
    /// | 413 | `PayloadTooLarge` | `failed(PAYLOAD_TOO_LARGE)` |
    /// | 429 | `TooManyRequests`, `TooManyProviderTokenUpdates` | `retry(after: Retry-After)` |
    /// | 5xx | `InternalServerError`, `ServiceUnavailable`, `Shutdown` | `retry(after: Retry-After)` |
    /// | other | (`BadPath` 404, `MethodNotAllowed` 405, …) | `failed(PROVIDER_REJECTED)` |
    ///
    /// - Parameters:
    ///   - status: HTTP `:status`.
    ///   - body: response body bytes (empty on success).
    ///   - apnsId: the response's `apns-id` header (echoes the request's), stored on success.
    ///   - retryAfterHeader: a `Retry-After` header, if any (seconds; APNs rarely sends one).
    ///   - isRetryAfterRefresh: true when this answers the single retry made after
    ///     `refreshCredentialAndRetryOnce`/`reconnectAndRetryOnce`; the same error then
    ///     fails with `PROVIDER_CREDENTIALS_INVALID` instead of looping.
    public static func apns(
        status: Int, body: [UInt8], apnsId: String? = nil, retryAfterHeader: String? = nil,
        isRetryAfterRefresh: Bool = false
    ) -> ProviderOutcome {
        if (200..<300).contains(status) { return .accepted(providerId: apnsId) }
        let reason = apnsReason(body)
        let credentials = ProviderOutcome.failed(code: Code.credentialsInvalid, providerStatus: status, providerReason: reason)
        switch status {
        case 410:
            return .tokenDead(providerStatus: status, providerReason: reason)
        case 400 where reason == "BadDeviceToken":
            return .tokenDead(providerStatus: status, providerReason: reason)
        case 400 where reason == "IdleTimeout":
            return .retry(after: retryAfterSeconds(retryAfterHeader))
        case 403 where reason == "ExpiredProviderToken":
            return isRetryAfterRefresh ? credentials : .refreshCredentialAndRetryOnce
        case 403 where reason == "UnrelatedKeyIdInToken":
            return isRetryAfterRefresh ? credentials : .reconnectAndRetryOnce
        case 403:
            return credentials
        case 413:
            return .failed(code: Code.payloadTooLarge, providerStatus: status, providerReason: reason)
        case 429, 500..<600:
            return .retry(after: retryAfterSeconds(retryAfterHeader))
        default:
            return .failed(code: Code.rejected, providerStatus: status, providerReason: reason)
        }
    }
}
