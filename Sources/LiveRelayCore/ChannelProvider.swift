import Foundation

/// The answer of APNs channel management to a create or delete (Apple, "Sending channel
/// management requests to APNs"; docs/channels.md).
public enum ChannelManagementResult: Sendable, Equatable {
    /// `201` (create) / `200` (delete); `channelId` is the `apns-channel-id` header of a create.
    case ok(channelId: String?)
    /// APNs answered with an error status and its `reason`.
    case refused(status: Int, reason: String)
    /// The request never got an answer (connection failed, timeout); `message` says why.
    case unavailable(message: String)
    /// The tenant has no usable APNs credential for this environment whose topics list the app
    /// (nothing was sent); creating a channel then answers `400 INVALID_REQUEST` naming `app_id`.
    case noCredentials(message: String)
}

/// The answer of APNs to one broadcast request (Apple, "Sending broadcast push notification
/// requests to APNs"; docs/channels.md).
public enum BroadcastResult: Sendable, Equatable {
    /// `200`: the `apns-request-id` and `apns-unique-id` response headers.
    case accepted(requestId: String?, uniqueId: String?)
    /// An error status with APNs' `reason`; `retryAfterSeconds` from `Retry-After` when sent.
    case refused(status: Int, reason: String, retryAfterSeconds: Double?)
    /// The request provably did not reach APNs (connection refused, GOAWAY below the stream, refused stream).
    case notProcessed(message: String)
    /// The request may have reached APNs (connection lost after sending).
    case possiblyProcessed(message: String)
    /// No APNs credential for the tenant and environment.
    case noCredentials(message: String)
}

/// One broadcast request: the §8 update/end `{"aps": …}` body (built by `DeliveryPayload.apns`)
/// for channel `apnsChannelId` of `appId` (docs/channels.md "APNs wire").
public struct BroadcastRequest: Sendable, Equatable {
    public var tenantId: String
    public var appId: String
    /// `sandbox` or `production`.
    public var environment: String
    /// `apns-channel-id`.
    public var apnsChannelId: String
    /// The exact body bytes.
    public var body: [UInt8]
    /// `apns-priority`: 1, 5 or 10.
    public var priority: Int
    /// `apns-expiration` in epoch seconds (0 for storage policy `none`).
    public var expiration: Int64
    /// `apns-request-id`: the UUID of this attempt.
    public var requestId: String
    public init(
        tenantId: String, appId: String, environment: String, apnsChannelId: String, body: [UInt8], priority: Int,
        expiration: Int64, requestId: String
    ) {
        self.tenantId = tenantId; self.appId = appId; self.environment = environment; self.apnsChannelId = apnsChannelId
        self.body = body; self.priority = priority; self.expiration = expiration; self.requestId = requestId
    }
}

/// APNs channel management as the API needs it (create before storing a channel, delete after
/// its end). Implemented in `Delivery` over the APNs channel-management host (configuration
/// `LIVERELAY_APNS_CHANNELS_*_URL`, docs/configuration.md), sharing the (team, key) JWT of
/// docs/providers.md. Calls block until APNs answers or the request fails.
public protocol ChannelManaging: Sendable {
    /// `POST /1/apps/<appId>/channels` `{"message-storage-policy": storagePolicy, "push-type": "LiveActivity"}`.
    func createChannel(tenantId: String, appId: String, environment: String, storagePolicy: Int) -> ChannelManagementResult
    /// `DELETE /1/apps/<appId>/channels` with header `apns-channel-id`.
    func deleteChannel(tenantId: String, appId: String, environment: String, apnsChannelId: String) -> ChannelManagementResult
}

/// Sends one broadcast (`POST /4/broadcasts/apps/<appId>` on `LIVERELAY_APNS_BROADCAST_*_URL`);
/// blocks until the answer.
public protocol BroadcastSending: Sendable {
    func broadcast(_ request: BroadcastRequest) -> BroadcastResult
}

/// Channel management used when no APNs channel client is configured: every call is
/// `unavailable` (creating a channel then answers `502 PROVIDER_ERROR`): the process has no
/// channel-management endpoint at all, which is an operator matter, not the tenant's.
public struct UnconfiguredChannelManager: ChannelManaging, BroadcastSending {
    public init() {}
    public func createChannel(tenantId: String, appId: String, environment: String, storagePolicy: Int) -> ChannelManagementResult {
        .unavailable(message: "no APNs channel-management client is configured")
    }
    public func deleteChannel(tenantId: String, appId: String, environment: String, apnsChannelId: String) -> ChannelManagementResult {
        .unavailable(message: "no APNs channel-management client is configured")
    }
    public func broadcast(_ request: BroadcastRequest) -> BroadcastResult {
        .noCredentials(message: "no APNs broadcast client is configured")
    }
}
