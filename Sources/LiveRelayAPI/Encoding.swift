import Foundation
import JSON
import LiveRelayStore

/// Response objects of docs/endpoints.md (snake_case, UTC millisecond times, never a secret).
enum Encode {
    /// The tenant object; the two budgets are the tenant's own values, null when it uses the
    /// deployment default (docs/priority-budget.md; capabilities show the effective ones).
    static func tenant(_ t: TenantRecord) -> JSONValue {
        .object([
            "id": .string(t.id), "name": .string(t.name), "daily_push_quota": .int(t.dailyPushQuota),
            "status": .string(t.status), "created_at": J.ts(t.createdAt), "updated_at": J.ts(t.updatedAt),
            "priority10_hourly_budget": t.priority10HourlyBudget.map { .int(Int64($0)) } ?? .null,
            "frequent_updates_hourly_budget": t.frequentUpdatesHourlyBudget.map { .int(Int64($0)) } ?? .null
        ])
    }

    static func masterKey(_ k: MasterKeyRecord, now: Date, credential: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(k.id), "object": "master_key", "label": .string(k.label),
            "status": .string(k.status(now: now)), "created_by": J.str(k.createdBy),
            "created_at": J.ts(k.createdAt), "revoked_at": J.ts(k.revokedAt), "expires_at": J.ts(k.expiresAt)
        ]
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    static func senderKey(_ k: SenderKeyRecord, now: Date, credential: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(k.id), "object": "sender_key", "label": .string(k.label),
            "targets": J.strs(k.targets), "created_from": J.strs(k.createdFrom),
            "permissions": J.strs(k.permissions), "status": .string(k.status(now: now)),
            "created_by": .string(k.createdBy), "created_at": J.ts(k.createdAt),
            "expires_at": J.ts(k.expiresAt), "revoked_at": J.ts(k.revokedAt)
        ]
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    static func publishableKey(_ k: PublishableKeyRecord, credential: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(k.id), "object": "publishable_key", "app_id": J.str(k.appId),
            "platform": J.str(k.platform), "label": .string(k.label),
            "status": .string(k.revokedAt == nil ? "active" : "revoked"),
            "created_at": J.ts(k.createdAt), "revoked_at": J.ts(k.revokedAt)
        ]
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    static func installation(_ i: InstallationRecord, credential: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(i.id), "installation_id": .string(i.id), "object": "installation",
            "app_id": .string(i.appId), "platform": .string(i.platform),
            "environment": .string(i.environment), "install_id": .string(i.installId),
            "fcm_token_registered": .bool(i.fcmToken != nil),
            "os_version": J.str(i.osVersion), "frequent_updates": .bool(i.frequentUpdates), "status": .string(i.status),
            "created_at": J.ts(i.createdAt), "retired_at": J.ts(i.retiredAt)
        ]
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    static func auditEvent(_ e: AuditEvent) -> JSONValue {
        .object([
            "id": .string(e.id), "actor_id": .string(e.actorId), "action": .string(e.action),
            "object_type": .string(e.objectType), "object_id": J.str(e.objectId), "request_id": .string(e.requestId),
            "details": e.details, "created_at": J.ts(e.createdAt)
        ])
    }
}
