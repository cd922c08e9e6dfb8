import Foundation
import Crypto
import JSON
import LiveRelayCore
import LiveRelayStore

/// Builds the provider request of a claimed operation (docs/providers.md) and maps the sender's
/// `PushResult` onto the transition table's input.
public enum DispatchPush {
    /// The push for `op` (claimed: its APNs `timestamp` is assigned), at `op.sendPriority`
    /// (the priority-budget decision of the claim, docs/priority-budget.md).
    /// - Parameters:
    ///   - defaultExpirationSeconds: `apns-expiration` = now + this when the write had no `expires_at`.
    /// - Throws: `DomainError` 413 when the payload is over the provider limit; `DispatchPushError`
    ///   when there is no token to send to.
    public static func build(
        _ op: DispatchOperation, now: Date, defaultExpirationSeconds: Int, apnsId: String = SecureRandom.uuidV4()
    ) throws -> OutgoingPush {
        guard let token = op.deviceToken else { throw DispatchPushError.noToken }
        let timestamp = Date(timeIntervalSince1970: TimeInterval(op.providerTimestamp ?? Timestamp.epochSeconds(now)))
        // A stateless end sends the target's current committed state (docs/write-semantics.md, docs/providers.md).
        let state = op.state ?? op.targetState
        let content = DeliveryPayload.Content(
            event: op.kind, targetId: op.targetId, revision: op.revision, templateVersion: op.templateVersion ?? "", state: state,
            alert: op.alert, staleAt: op.staleAt, relevanceScore: op.relevanceScore, dismissAt: op.dismissAt,
            attributesType: op.attributesType, businessKey: op.businessKey, channelId: op.channelId, inputPushChannel: op.inputPushChannel)
        let expiration = op.expiresAt ?? now.addingTimeInterval(TimeInterval(defaultExpirationSeconds))
        var apnsBody: [UInt8]?, fcmBody: [UInt8]?
        if op.platform == "android" {
            fcmBody = try DeliveryPayload.fcm(
                content, token: token, timestamp: timestamp,
                ttlSeconds: FCMMessage.ttlSeconds(expiration: expiration, now: now)
            ).checkedBytes()
        } else {
            apnsBody = try DeliveryPayload.apns(content, timestamp: timestamp).checkedBytes()
        }
        return OutgoingPush(
            tenantId: op.tenantId, operationId: op.id, platform: op.platform, environment: op.environment, appId: op.appId,
            deviceToken: token, apnsBody: apnsBody, fcmBody: fcmBody, priority: op.sendPriority, expiration: expiration,
            apnsId: apnsId)
    }

    /// `PushResult` → `DispatchAttemptResult`.
    public static func attemptResult(_ r: PushResult) -> DispatchAttemptResult {
        switch r {
        case .outcome(let o): return .provider(o)
        case .notProcessed(let why): return .notProcessed(why)
        case .possiblyProcessed(let why): return .possiblyProcessed(why)
        case .noCredentials(let why): return .noCredentials(why)
        }
    }
}

/// Why a claimed operation could not be turned into a request.
public enum DispatchPushError: Error, Equatable {
    /// The token vanished between the claim's check and the build (not expected).
    case noToken
}
