import Foundation
import LiveRelayCore

/// `APNsChannelClient` as the API's `ChannelManaging` (create before storing a channel, delete
/// after its end) and the channel worker's `BroadcastSending` (docs/channels.md "APNs wire").
/// Calls block at most `timeoutSeconds` (seconds).
public struct APNsChannelProvider: ChannelManaging, BroadcastSending {
    public let client: APNsChannelClient
    public let timeoutSeconds: Double
    public init(client: APNsChannelClient, timeoutSeconds: Double = 10) { self.client = client; self.timeoutSeconds = timeoutSeconds }

    /// Maps a channel-client failure to the API's result: an APNs error status → `refused`;
    /// no usable credential → `noCredentials` (the API answers `400`); no answer → `unavailable`
    /// (the API answers `502 PROVIDER_ERROR`).
    public static func management(_ e: APNsChannelError) -> ChannelManagementResult {
        switch e {
        case .provider(let r): return .refused(status: r.status, reason: r.reason ?? "")
        case .invalidResponse(let s, let why): return .refused(status: s, reason: why)
        case .notProcessed(let why), .possiblyProcessed(let why): return .unavailable(message: why)
        case .noCredentials(let why): return .noCredentials(message: why)
        }
    }

    public func createChannel(tenantId: String, appId: String, environment: String, storagePolicy: Int) -> ChannelManagementResult {
        switch client.createChannel(
            tenantId: tenantId, appId: appId, environment: environment,
            storagePolicy: APNsMessageStoragePolicy(rawValue: storagePolicy) ?? .noMessageStored, timeoutSeconds: timeoutSeconds)
        {
        case .success(let c): return .ok(channelId: c.channelId)
        case .failure(let e): return APNsChannelProvider.management(e)
        }
    }

    public func deleteChannel(tenantId: String, appId: String, environment: String, apnsChannelId: String) -> ChannelManagementResult {
        switch client.deleteChannel(
            tenantId: tenantId, appId: appId, environment: environment, channelId: apnsChannelId, timeoutSeconds: timeoutSeconds)
        {
        case .success: return .ok(channelId: apnsChannelId)
        case .failure(let e): return APNsChannelProvider.management(e)
        }
    }

    public func broadcast(_ r: BroadcastRequest) -> BroadcastResult {
        let res = client.sendBroadcast(
            OutgoingBroadcast(
                tenantId: r.tenantId, channelOperationId: r.requestId, environment: r.environment,
                appId: r.appId, channelId: r.apnsChannelId, body: r.body, priority: r.priority,
                expiration: r.expiration, apnsRequestId: r.requestId))
        if let status = res.status {
            if (200..<300).contains(status) { return .accepted(requestId: res.apnsRequestId, uniqueId: res.apnsUniqueId) }
            // A `429`/`5xx` answer's `Retry-After` (seconds or an HTTP date), as the outcome read it.
            var retryAfter: Double?
            if case .outcome(.retry(let after)) = res.result { retryAfter = after }
            return .refused(status: status, reason: res.reason ?? "", retryAfterSeconds: retryAfter)
        }
        switch res.result {
        case .notProcessed(let why): return .notProcessed(message: why)
        case .possiblyProcessed(let why): return .possiblyProcessed(message: why)
        case .noCredentials(let why): return .noCredentials(message: why)
        case .outcome: return .possiblyProcessed(message: "no HTTP status in the broadcast answer")
        }
    }
}
