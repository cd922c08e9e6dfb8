import Foundation

extension ProviderOutcome {
    /// Classifies an APNs broadcast response (docs/channels.md "APNs wire"; Apple "Sending
    /// broadcast push notification requests to APNs", "Handling error responses from Apple Push
    /// Notification service").
    ///
    /// | status | reason | outcome |
    /// | --- | --- | --- |
    /// | 2xx | – | `accepted(providerId: apns-unique-id ?? apns-request-id)` |
    /// | 400, 404, 410 | `ChannelNotRegistered`, `BadChannelId` | `tokenDead` (the channel is the dead destination: channel operation `failed`, channel `ended` with reason `channel_invalid`) |
    /// | 400 | others (`MissingChannelId`, `BadPriority`, `BadExpirationDate`, `MissingPushType`, `InvalidPushType`, `PayloadEmpty`, `FeatureNotEnabled`, …) | `failed(PROVIDER_REJECTED)` |
    /// | 403 | `ExpiredProviderToken` | `refreshCredentialAndRetryOnce` |
    /// | 403 | `UnrelatedKeyIdInToken` | `reconnectAndRetryOnce` |
    /// | 403 | others | `failed(PROVIDER_CREDENTIALS_INVALID)` |
    /// | 413 | `PayloadTooLarge` | `failed(PAYLOAD_TOO_LARGE)` |
    /// | 429, 5xx | – | `retry(after: Retry-After)` |
    /// | other | – | `failed(PROVIDER_REJECTED)` |
    ///
    /// - Parameters:
    ///   - status: HTTP `:status`.
    ///   - body: response body (`{"reason": …}` on errors).
    ///   - providerId: what `accepted` stores (the caller passes `apns-unique-id`, else `apns-request-id`).
    ///   - retryAfterHeader: a `Retry-After` header (delta seconds), if any.
    ///   - isRetryAfterRefresh: true for the answer to the single retry after a refresh/reconnect.
    public static func apnsBroadcast(
        status: Int, body: [UInt8], providerId: String? = nil, retryAfterHeader: String? = nil,
        isRetryAfterRefresh: Bool = false
    ) -> ProviderOutcome {
        let reason = apnsReason(body)
        if isChannelInvalid(status: status, reason: reason) { return .tokenDead(providerStatus: status, providerReason: reason) }
        switch status {
        case 400, 404, 410:
            return .failed(code: Code.rejected, providerStatus: status, providerReason: reason)
        default:
            // 2xx, 403, 413, 429 and 5xx are read exactly as for a device push (docs/providers.md "Responses").
            return apns(status: status, body: body, apnsId: providerId, retryAfterHeader: retryAfterHeader, isRetryAfterRefresh: isRetryAfterRefresh)
        }
    }

    /// True when APNs says the broadcast channel does not exist or its id is malformed
    /// (`ChannelNotRegistered`, `BadChannelId`): the channel is gone for good.
    public static func isChannelInvalid(status: Int, reason: String?) -> Bool {
        (status == 400 || status == 404 || status == 410) && (reason == "ChannelNotRegistered" || reason == "BadChannelId")
    }
}
