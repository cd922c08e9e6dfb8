import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore

/// Response objects of the lifecycle (docs/endpoints.md senders, §5). A target object carries no
/// business state (that is the snapshot's, behind `activities:read-state`).
extension Encode {
    /// The target object. `priority10_sent_last_hour` counts the target's priority-10 sends in
    /// the 60 minutes before `now` and `priority10_budget` is the budget that applies to it;
    /// both null for Android targets (docs/priority-budget.md).
    static func target(_ t: TargetRecord, now: Date = Date()) -> JSONValue {
        var report: JSONValue = .null
        if let r = t.lastRenderReport, case .object(var o) = r {
            // A report for an older revision is shown as stale, never as the latest result (docs/templates.md).
            if let rev = o["revision"]?.intValue { o["stale"] = .bool(rev < t.revision) }
            report = .object(o)
        }
        return .object([
            "id": .string(t.id), "object": "target", "status": .string(t.status.rawValue), "end_reason": J.str(t.endReason),
            "revision": .int(t.revision), "token_status": .string(t.tokenStatus), "origin": .string(t.origin),
            "installation_id": .string(t.installationId), "start_target_id": J.str(t.startTargetId),
            "activity_type": .string(t.activityType), "template_version": J.str(t.templateVersion),
            "business_key": J.str(t.businessKey), "business_generation": J.str(t.businessGeneration),
            "stale_at": J.ts(t.staleAt), "relevance_score": t.relevanceScore.map(JSONValue.double) ?? .null,
            "last_render_report": report, "created_at": J.ts(t.createdAt), "updated_at": J.ts(t.updatedAt),
            "started_at": J.ts(t.startedAt), "ended_at": J.ts(t.endedAt),
            "channel_id": J.str(t.channelId), "delivery": J.str(t.delivery),
            "priority10_sent_last_hour": t.priority10Budget == nil
                ? .null
                : .int(Int64(PriorityBudget.sendsInWindow(t.priority10Sends, nowMs: PriorityBudget.epochMilliseconds(now)))),
            "priority10_budget": t.priority10Budget.map { .int(Int64($0)) } ?? .null
        ])
    }

    static func operation(_ o: OperationRecord) -> JSONValue {
        .object([
            "id": .string(o.id), "object": "operation", "target_id": .string(o.targetId), "kind": .string(o.kind.rawValue),
            "status": .string(o.status.rawValue), "pending_reason": J.str(o.pendingReason), "revision": .int(o.revision),
            "superseded_by": J.str(o.supersededBy), "apns_id": J.str(o.apnsId), "failure": o.failure ?? .null,
            "consumes_quota": .bool(o.consumesQuota), "has_alert": .bool(o.hasAlert), "priority": .int(Int64(o.effectivePriority)),
            "requested_priority": .int(Int64(o.priority)), "priority_downgraded": .bool(o.priorityDowngraded),
            "expires_at": J.ts(o.expiresAt), "created_at": J.ts(o.createdAt), "updated_at": J.ts(o.updatedAt),
            "accepted_at": J.ts(o.acceptedAt)
        ])
    }

    static func snapshot(_ t: TargetRecord) -> JSONValue {
        .object([
            "target_id": .string(t.id), "revision": .int(t.revision), "state": t.state, "status": .string(t.status.rawValue),
            "source_version": t.sourceVersion.map(JSONValue.int) ?? .null, "updated_at": J.ts(t.updatedAt)
        ])
    }
}
