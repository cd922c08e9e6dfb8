import Foundation
import JSON

/// One channel write as the fan-out planner sees it.
public struct ChannelWriteFacts: Sendable, Equatable {
    /// The channel operation id (`cop_…`).
    public let id: String
    /// Commit order within the channel.
    public let seq: Int64
    public let kind: PushEvent
    public let hasAlert: Bool
    public init(id: String, seq: Int64, kind: PushEvent, hasAlert: Bool) {
        self.id = id; self.seq = seq; self.kind = kind; self.hasAlert = hasAlert
    }
}

/// Broadcast status of a channel operation (docs/channels.md).
public enum BroadcastStatus: String, Sendable, CaseIterable {
    case queued, sending, accepted, failed, superseded, expired, cancelled
    /// Nothing more will happen to the broadcast.
    public var isFinal: Bool { !(self == .queued || self == .sending) }
}

/// What to do with a broadcast attempt's answer (docs/channels.md "APNs wire").
public enum BroadcastDecision: Sendable, Equatable {
    /// `200`: store `apns-request-id` / `apns-unique-id`; the broadcast consumes one quota unit.
    case accepted(requestId: String?, uniqueId: String?)
    /// `400`/`404`/`410` `ChannelNotRegistered` / `BadChannelId`: the channel operation fails and the channel
    /// ends with reason `channel_invalid`.
    case channelInvalid(failure: JSONValue)
    /// Any other refusal (credential errors as docs/providers.md: `PROVIDER_CREDENTIALS_INVALID`).
    case failed(failure: JSONValue)
    /// `429`, `5xx`, not processed, or possibly processed state-only: try again after `delay` seconds.
    case retry(delay: Double)
}

/// The pure channel rules of docs/channels.md: who is served by the broadcast, what fan-out
/// sends each member, what a broadcast answer means, the channel operation's status.
public enum ChannelRules {
    /// Active channels per (app, environment) at most (`409 CHANNEL_LIMIT` beyond).
    public static let maxActiveChannelsPerApp = 10_000

    /// Whether a member is served by the APNs broadcast: an iOS installation reporting
    /// `os_version` 18.0 or later. Unknown or unparsable versions, older iOS and Android are
    /// served by fan-out.
    public static func deliversByBroadcast(platform: String, osVersion: String?) -> Bool {
        guard platform == "ios", let v = osVersion, let major = Int(v.split(separator: ".").first ?? "") else { return false }
        return major >= 18
    }

    /// The channel writes fan-out queues to a member whose newest queued channel write has
    /// sequence number `watermark`, given the committed writes `writes` (any order): of those
    /// newer than the watermark, every write with an alert and the newest write, in commit
    /// order — intermediate state-only writes are skipped (each write carries the full state),
    /// alerts never are, and a member never gets an older write after a newer one. Writes after
    /// an end cannot exist (the channel refuses them).
    public static func fanoutSends(watermark: Int64, writes: [ChannelWriteFacts]) -> [ChannelWriteFacts] {
        let newer = writes.filter { $0.seq > watermark }.sorted { $0.seq < $1.seq }
        guard let newest = newer.last else { return [] }
        return newer.filter { $0.hasAlert || $0.seq == newest.seq }
    }

    /// Which queued broadcasts a new channel write supersedes (the per-target coalescing rule
    /// applied to the channel): a state-bearing write supersedes queued state-only updates; an
    /// end supersedes every queued update. Alerts are never coalesced by an update.
    public static func supersededBroadcasts(by kind: PushEvent, queued: [ChannelWriteFacts]) -> [String] {
        WriteRules.superseded(
            by: kind, hasState: true,
            queued: queued.map { QueuedOperation(id: $0.id, kind: $0.kind, hasState: true, hasAlert: $0.hasAlert) })
    }

    /// Maps a broadcast answer (docs/channels.md "APNs wire"). `hasAlert`: an alert broadcast
    /// that may have reached APNs is not resent (it fails as unknown); a state-only one is
    /// (idempotent by timestamp). `attempts`: attempts so far including this one.
    public static func decide(
        _ result: BroadcastResult, hasAlert: Bool, attempts: Int, random: Double, policy: RetryPolicy = .standard
    ) -> BroadcastDecision {
        func failure(_ code: String, _ message: String, status: Int?, reason: String?) -> JSONValue {
            .object([
                "code": .string(code), "message": .string(message), "provider_status": status.map { .int(Int64($0)) } ?? .null,
                "provider_reason": reason.map(JSONValue.string) ?? .null
            ])
        }
        switch result {
        case .accepted(let r, let u):
            return .accepted(requestId: r, uniqueId: u)
        case .refused(let status, let reason, let retryAfter):
            if [400, 404, 410].contains(status) && (reason == "ChannelNotRegistered" || reason == "BadChannelId") {
                return .channelInvalid(failure: failure("CHANNEL_INVALID", "APNs no longer knows this channel", status: status, reason: reason))
            }
            if status == 429 || status >= 500 { return .retry(delay: policy.delay(attempt: attempts, random: random, retryAfter: retryAfter)) }
            if status == 403 {
                return .failed(
                    failure: failure("PROVIDER_CREDENTIALS_INVALID", "APNs refused the provider credential", status: status, reason: reason))
            }
            return .failed(failure: failure("PROVIDER_REJECTED", "APNs refused the broadcast", status: status, reason: reason))
        case .notProcessed:
            return .retry(delay: policy.delay(attempt: attempts, random: random))
        case .possiblyProcessed(let m):
            if hasAlert { return .failed(failure: failure("OUTCOME_UNKNOWN", m, status: nil, reason: nil)) }
            return .retry(delay: policy.delay(attempt: attempts, random: random))
        case .noCredentials(let m):
            return .failed(failure: failure("PROVIDER_CREDENTIALS_MISSING", m, status: nil, reason: nil))
        }
    }

    /// A channel operation's `status` from its parts: `superseded` when a newer write replaced
    /// it before anything was sent; `failed` when its broadcast failed; `queued` before any
    /// delivery started; `sending` while the broadcast or the fan-out is in progress;
    /// `accepted` when the broadcast was accepted (or not needed) and fan-out has reached
    /// every member.
    public static func operationStatus(broadcast: BroadcastStatus?, fanoutDone: Bool, fanoutStarted: Bool, superseded: Bool) -> String {
        if broadcast == .failed { return "failed" }
        if broadcast == .expired { return "expired" }
        let bDone = broadcast == nil || broadcast == .accepted || broadcast == .superseded || broadcast == .cancelled
        if superseded && broadcast != .accepted && !fanoutStarted { return "superseded" }
        if bDone && fanoutDone { return "accepted" }
        if broadcast == .queued && !fanoutStarted { return "queued" }
        return "sending"
    }
}
