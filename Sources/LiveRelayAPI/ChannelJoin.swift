import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/channels.md "Joining a channel": the checks a remote start or local start reservation
/// with `channel_id` passes, and how the new target is served.
enum ChannelJoin {
    /// The decided membership: the channel and the new target's `delivery`.
    struct Decision { let channel: ChannelRecord; let delivery: String }

    /// What the joining activity is: its installation, app, activity type, attributes type and
    /// the canonical schema of its template version.
    struct Joiner {
        let installationId: String, appId: String, activityType: String, attributesType: String?, schema: JSONValue?
    }

    /// Rule 1 for the channel (a sender key must name it in `targets`, else 403) — call before
    /// anything else is read. A device (scope nil) may join any channel of its tenant.
    static func checkCoverage(_ scope: SenderScope?, channelId: String) throws {
        if let scope, !scope.targets.contains(channelId) {
            throw Endpoint.forbidden("this sender key does not name channel \(channelId) in its targets")
        }
    }

    /// Locks the channel and decides: absent → 404; `ending`/`ended` → `409 CHANNEL_ENDED`;
    /// app, environment, activity type, attributes type or schema differing from the channel's →
    /// `409 CHANNEL_MISMATCH` with `details.field`. `localStart`: the app subscribed the activity
    /// to the channel itself (always `broadcast`); otherwise iOS 18+ (by `os_version`) is
    /// `broadcast` and everything else `fanout`.
    static func decide(_ c: PostgresConnection, tenant: String, channelId: String, joiner j: Joiner, localStart: Bool) throws -> Decision {
        guard let f = try ChannelStore.joinFacts(c, tenantId: tenant, channelId: channelId, installationId: j.installationId) else {
            throw Endpoint.notFound("channel")
        }
        let ch = f.channel
        try ChannelHandlers.checkWritable(ch)
        func mismatch(_ field: String, _ mine: String, _ theirs: String) -> DomainError {
            DomainError(
                status: 409, code: "CHANNEL_MISMATCH",
                message: "the activity's \(field) (\(mine)) differs from channel \(ch.id)'s (\(theirs))",
                details: ["field": .string(field), "channel_id": .string(ch.id)])
        }
        if j.appId != ch.appId { throw mismatch("app_id", j.appId, ch.appId) }
        if f.environment != ch.environment { throw mismatch("environment", f.environment, ch.environment) }
        if j.activityType != ch.activityType { throw mismatch("activity_type", j.activityType, ch.activityType) }
        if (j.attributesType ?? "") != ch.attributesType { throw mismatch("attributes_type", j.attributesType ?? "none", ch.attributesType) }
        if j.schema != ch.schema {
            throw DomainError(
                status: 409, code: "CHANNEL_MISMATCH", message: "the activity's template schema differs from channel \(ch.id)'s schema",
                details: ["field": "schema", "channel_id": .string(ch.id)])
        }
        let broadcast = localStart ? f.platform == "ios" : ChannelRules.deliversByBroadcast(platform: f.platform, osVersion: f.osVersion)
        return Decision(channel: ch, delivery: broadcast ? "broadcast" : "fanout")
    }

    /// `409 TARGET_ON_CHANNEL`: members are driven by their channel only.
    static func checkNotMember(_ t: TargetRecord) throws {
        if let ch = t.channelId {
            throw DomainError(
                status: 409, code: "TARGET_ON_CHANNEL",
                message: "target \(t.id) is a member of channel \(ch); write to the channel instead",
                details: ["channel_id": .string(ch)])
        }
    }
}
