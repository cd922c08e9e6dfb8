import Foundation
import JSON

/// The parts of an FCM HTTP v1 error body the dispatcher decides on:
/// `{"error": {"code": 404, "message": "...", "status": "NOT_FOUND",
///   "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
///                "errorCode": "UNREGISTERED"}]}}` (Google "FCM HTTP v1 API", `ErrorCode`).
public struct FCMErrorBody: Sendable, Equatable {
    /// `error.status` (google.rpc code name, e.g. `NOT_FOUND`, `INVALID_ARGUMENT`).
    public var status: String?
    /// The first `error.details[].errorCode` (FCM `ErrorCode`, e.g. `UNREGISTERED`).
    public var errorCode: String?

    public init(status: String?, errorCode: String?) {
        self.status = status
        self.errorCode = errorCode
    }

    /// Parses a response body; both fields nil for an empty or malformed body.
    public init(body: [UInt8]) {
        let error = ProviderOutcome.jsonObject(body)?["error"]
        status = error?["status"]?.stringValue
        errorCode = error?["details"]?.arrayValue?.lazy.compactMap { $0["errorCode"]?.stringValue }.first
    }

    /// What is recorded as `provider_reason`: the FCM `errorCode`, else `error.status`.
    public var reason: String? { errorCode ?? status }

    /// True when either field names `code`.
    func names(_ code: String) -> Bool { errorCode == code || status == code }
}

extension ProviderOutcome {
    /// Classifies an FCM HTTP v1 `messages:send` response (docs/providers.md; Google "FCM HTTP v1 API",
    /// `ErrorCode`). `errorCode` and `error.status` are both consulted, first match wins:
    ///
    /// | condition | outcome |
    /// | --- | --- |
    /// | 2xx | `accepted(providerId: body.name)` (`projects/…/messages/…`) |
    /// | `UNREGISTERED` (404) | `tokenDead` (installation token dead) |
    /// | 401, except `THIRD_PARTY_AUTH_ERROR` | `refreshCredentialAndRetryOnce` (new access token, one retry) |
    /// | 401 `THIRD_PARTY_AUTH_ERROR`, 403 (`SENDER_ID_MISMATCH`, `PERMISSION_DENIED`) | `failed(PROVIDER_CREDENTIALS_INVALID)` |
    /// | 429 / `QUOTA_EXCEEDED` / `RESOURCE_EXHAUSTED` | `retry(after: Retry-After)` |
    /// | 5xx (`INTERNAL` 500, `UNAVAILABLE` 503) | `retry(after: Retry-After)` |
    /// | 413 | `failed(PAYLOAD_TOO_LARGE)` |
    /// | 400 `INVALID_ARGUMENT` and every other status | `failed(PROVIDER_REJECTED)` |
    ///
    /// A 404 without `UNREGISTERED` (e.g. an unknown project) is `failed(PROVIDER_REJECTED)`:
    /// a token is declared dead only on positive evidence.
    ///
    /// - Parameters:
    ///   - status: HTTP status.
    ///   - body: response body bytes.
    ///   - retryAfterHeader: the `Retry-After` header (delta-seconds honoured; see
    ///     `retryAfterSeconds`).
    ///   - isRetryAfterRefresh: true when this answers the single retry after
    ///     `refreshCredentialAndRetryOnce`; a second 401 then fails with
    ///     `PROVIDER_CREDENTIALS_INVALID`.
    public static func fcm(
        status: Int, body: [UInt8], retryAfterHeader: String? = nil,
        isRetryAfterRefresh: Bool = false
    ) -> ProviderOutcome {
        if (200..<300).contains(status) {
            return .accepted(providerId: jsonObject(body)?["name"]?.stringValue)
        }
        let err = FCMErrorBody(body: body)
        let reason = err.reason
        let credentials = ProviderOutcome.failed(code: Code.credentialsInvalid, providerStatus: status, providerReason: reason)
        let retry = ProviderOutcome.retry(after: retryAfterSeconds(retryAfterHeader))
        if err.names("UNREGISTERED") { return .tokenDead(providerStatus: status, providerReason: reason) }
        switch status {
        case 401:
            if err.names("THIRD_PARTY_AUTH_ERROR") || isRetryAfterRefresh { return credentials }
            return .refreshCredentialAndRetryOnce
        case 403:
            return credentials
        case 413:
            return .failed(code: Code.payloadTooLarge, providerStatus: status, providerReason: reason)
        case 429, 500..<600:
            return retry
        default:
            if err.names("QUOTA_EXCEEDED") || err.names("RESOURCE_EXHAUSTED") { return retry }
            if err.names("SENDER_ID_MISMATCH") || err.names("PERMISSION_DENIED") { return credentials }
            return .failed(code: Code.rejected, providerStatus: status, providerReason: reason)
        }
    }
}
