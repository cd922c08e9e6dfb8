import Foundation
import JSON
import LiveRelayCore
import Postgres

/// An operation as the dispatcher sees it: the operation row plus everything needed to build
/// its push (target snapshot, tokens, installation, template `attributes-type`).
public struct DispatchOperation: Sendable, Equatable {
    public let tenantId: String
    public let id: String
    public let targetId: String
    public let seq: Int64
    public let kind: PushEvent
    public let revision: Int64
    public let hasState: Bool
    /// The operation's own committed snapshot (nil for a stateless end).
    public let state: JSONValue?
    public let alert: PushAlert?
    public let staleAt: Date?
    public let relevanceScore: Double?
    public let priority: Int
    public let expiresAt: Date?
    public let dismissAt: Date?
    public let consumesQuota: Bool
    public let quotaDay: String?
    /// Attempts including the current one (after a claim), or so far (rescue, expiry).
    public let attempts: Int
    public let createdAt: Date
    /// The APNs `timestamp` (epoch s) of this operation: assigned on the first claim, kept for resends.
    public let providerTimestamp: Int64?

    public let installationId: String
    public let startTargetId: String?
    public let templateVersion: String?
    public let businessKey: String?
    /// The target's current committed state (sent by a stateless end).
    public let targetState: JSONValue
    public let targetStatus: String
    public let pushToken: String?
    public let lastTimestamp: Int64
    /// `ios` or `android`.
    public let platform: String
    /// `sandbox` or `production`.
    public let environment: String
    public let appId: String
    public let fcmToken: String?
    public let pushToStartToken: String?
    public let attributesType: String?

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); targetId = try r.string("target_id"); seq = try r.int64("seq")
        guard let k = PushEvent(rawValue: try r.string("kind")) else { throw PostgresError(kind: .decoding, message: "bad operation kind") }
        kind = k
        revision = try r.int64("revision"); hasState = try r.bool("has_state")
        state = try r.optionalString("state").map { try JSONValue.parse($0, maxDepth: 128) }
        alert = try r.optionalString("alert").flatMap { text -> PushAlert? in
            guard let o = try? JSONValue.parse(text), let t = o["title"]?.stringValue, let b = o["body"]?.stringValue else { return nil }
            return PushAlert(title: t, body: b, sound: o["sound"]?.stringValue)
        }
        staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score"); priority = try r.int("priority")
        expiresAt = try r.optionalDate("expires_at"); dismissAt = try r.optionalDate("dismiss_at")
        consumesQuota = try r.bool("consumes_quota"); quotaDay = try r.optionalString("quota_day")
        attempts = try r.int("attempts"); createdAt = try r.date("created_at"); providerTimestamp = try r.optionalInt64("provider_timestamp")
        installationId = try r.string("installation_id"); startTargetId = try r.optionalString("start_target_id")
        templateVersion = try r.optionalString("template_version"); businessKey = try r.optionalString("business_key")
        targetState = try JSONValue.parse(try r.string("target_state"), maxDepth: 128)
        targetStatus = try r.string("target_status"); pushToken = try r.optionalString("push_token")
        lastTimestamp = try r.int64("last_timestamp")
        platform = try r.string("platform"); environment = try r.string("environment"); appId = try r.string("app_id")
        fcmToken = try r.optionalString("fcm_token"); pushToStartToken = try r.optionalString("push_to_start_token")
        attributesType = try r.optionalString("attributes_type")
    }

    private init(copy o: DispatchOperation, attempts: Int, providerTimestamp: Int64) {
        tenantId = o.tenantId; id = o.id; targetId = o.targetId; seq = o.seq; kind = o.kind; revision = o.revision; hasState = o.hasState
        state = o.state; alert = o.alert; staleAt = o.staleAt; relevanceScore = o.relevanceScore; priority = o.priority
        expiresAt = o.expiresAt; dismissAt = o.dismissAt; consumesQuota = o.consumesQuota; quotaDay = o.quotaDay
        self.attempts = attempts; createdAt = o.createdAt; self.providerTimestamp = providerTimestamp
        installationId = o.installationId; startTargetId = o.startTargetId; templateVersion = o.templateVersion; businessKey = o.businessKey
        targetState = o.targetState; targetStatus = o.targetStatus; pushToken = o.pushToken; lastTimestamp = max(o.lastTimestamp, providerTimestamp)
        platform = o.platform; environment = o.environment; appId = o.appId; fcmToken = o.fcmToken
        pushToStartToken = o.pushToStartToken; attributesType = o.attributesType
    }

    func claimed(providerTimestamp ts: Int64) -> DispatchOperation { DispatchOperation(copy: self, attempts: attempts + 1, providerTimestamp: ts) }

    /// The token this operation's push goes to: Android → the installation's FCM token; iOS
    /// start → the start target's push-to-start token; iOS update/end → the activity's update token.
    public var deviceToken: String? {
        if platform == "android" { return fcmToken }
        return kind == .start ? pushToStartToken : pushToken
    }

    /// The facts the transition table needs.
    public var facts: DispatchOperationFacts {
        DispatchOperationFacts(kind: kind, hasState: hasState, hasAlert: alert != nil, consumesQuota: consumesQuota,
                               attempts: attempts, expiresAt: expiresAt, platform: platform)
    }
}

/// Which row state an apply must still find (fencing against a worker that lost its lease).
public enum DispatchApplyGuard: Sendable, Equatable {
    /// `sending`, leased by `owner`, on attempt `attempts` (a normal result).
    case lease(owner: String, attempts: Int)
    /// `sending` with an expired lease (rescue of a dead worker's send).
    case expiredLease
    /// `queued` (expiry of an operation never sent).
    case queued
}

/// All SQL of the dispatcher (SPEC §5 ordering/unknown outcomes, §8 responses, §9 workers).
/// Runs in the system scope (`Database.system`); every statement names `tenant_id` where it
/// touches one tenant's rows.
public enum DispatchStore {
    static let selectColumns = """
        o.tenant_id, o.id, o.target_id, o.seq, o.kind, o.revision, o.has_state, o.state::text AS state, o.alert::text AS alert,
        o.stale_at, o.relevance_score, o.priority, o.expires_at, o.dismiss_at, o.consumes_quota, o.quota_day::text AS quota_day,
        o.attempts, o.created_at, o.provider_timestamp,
        t.installation_id, t.start_target_id, t.template_version, t.business_key, t.state::text AS target_state,
        t.status AS target_status, t.push_token, t.last_timestamp,
        i.platform, i.environment, i.app_id, i.fcm_token, s.push_to_start_token,
        (SELECT v.attributes_type FROM template_versions v
          WHERE v.tenant_id = t.tenant_id AND v.installation_id = t.installation_id AND v.id = t.template_version LIMIT 1) AS attributes_type
        """
    static let joins = """
        FROM operations o
        JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
        JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
        LEFT JOIN start_targets s ON s.tenant_id = t.tenant_id AND s.id = t.start_target_id
        """
    /// The operation is the head of its target's queue: no earlier non-final operation and
    /// nothing of the target in flight (at most one in flight per target, commit order).
    static let isHead = """
        NOT EXISTS (SELECT 1 FROM operations p WHERE p.tenant_id = o.tenant_id AND p.target_id = o.target_id
                      AND p.status IN ('queued', 'sending') AND (p.seq < o.seq OR p.status = 'sending'))
        """
    /// The token the push needs is registered.
    static let tokenReady = """
        (CASE WHEN i.platform = 'android' THEN i.fcm_token IS NOT NULL
              WHEN o.kind = 'start' THEN s.push_to_start_token IS NOT NULL
              ELSE t.push_token IS NOT NULL AND t.token_status = 'registered' END)
        """

    // MARK: claim

    /// Claims up to `limit` due operations in one statement (docs/delivery.md "Claims"):
    /// candidates come from `dispatch_heads` (migration 0007: at most one row per target, the
    /// head of its queue in commit order), at most `perTenant` per tenant with due work, taken
    /// round robin across tenants (every tenant's first candidate before any tenant's second;
    /// ties between tenants broken by a hash of the tenant id and `rotation`, so no tenant is
    /// always first). Each candidate is re-checked and locked with its target (`FOR UPDATE OF
    /// o, t SKIP LOCKED`): token registered → marked `sending` under `worker`'s lease
    /// (`leaseSeconds`), attempt counted, APNs `timestamp` assigned (max(now, target's
    /// `last_timestamp` + 1), kept on resends) on the operation and the target; token missing →
    /// parked (`pending_reason = 'token_pending'`, its head row leaves the queue until a token
    /// trigger or the un-park sweep clears it); target over → its queued work cancelled.
    /// Call inside one transaction; returns the claimed operations (attempts include this one).
    public static func claim(_ c: PostgresConnection, worker: String, limit: Int, leaseSeconds: Double, now: Date,
                             perTenant: Int? = nil, rotation: Int = 0) throws -> [DispatchOperation] {
        guard limit > 0 else { return [] }
        let nowS = Timestamp.epochSeconds(now)
        let rows = try c.query("""
            WITH RECURSIVE tenants AS (
                (SELECT h.tenant_id FROM dispatch_heads h WHERE h.due_at <= now() ORDER BY h.tenant_id LIMIT 1)
              UNION ALL
                SELECT (SELECT h.tenant_id FROM dispatch_heads h WHERE h.tenant_id > w.tenant_id AND h.due_at <= now()
                         ORDER BY h.tenant_id LIMIT 1)
                  FROM tenants w WHERE w.tenant_id IS NOT NULL
            ), candidates AS (
                SELECT x.tenant_id, x.operation_id,
                       row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.due_at, x.target_id) AS rn
                  FROM tenants w CROSS JOIN LATERAL (
                       SELECT h.tenant_id, h.target_id, h.operation_id, h.due_at FROM dispatch_heads h
                        WHERE h.tenant_id = w.tenant_id AND h.due_at <= now() ORDER BY h.due_at LIMIT $3) x
                 WHERE w.tenant_id IS NOT NULL
            ), picked AS (
                SELECT tenant_id, operation_id FROM candidates ORDER BY rn, hashtext(tenant_id || $4), operation_id LIMIT $2
            ), locked AS (
                SELECT \(selectColumns), \(tokenReady) AS token_ready, t.status IN ('ended', 'creation_failed') AS target_over
                  FROM picked p
                  JOIN operations o ON o.tenant_id = p.tenant_id AND o.id = p.operation_id
                  JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
                  JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
                  LEFT JOIN start_targets s ON s.tenant_id = t.tenant_id AND s.id = t.start_target_id
                 WHERE o.status = 'queued' AND o.next_attempt_at <= now() AND COALESCE(o.pending_reason, '') <> 'token_pending'
                   AND \(isHead)
                   FOR UPDATE OF o, t SKIP LOCKED
            ), claimed AS (
                UPDATE operations o SET status = 'sending', lease_owner = $1, lease_expires_at = now() + make_interval(secs => $5),
                       attempts = o.attempts + 1, sent_at = now(), pending_reason = NULL,
                       provider_timestamp = COALESCE(o.provider_timestamp, GREATEST($6::bigint, l.last_timestamp + 1)), updated_at = now()
                  FROM locked l
                 WHERE o.tenant_id = l.tenant_id AND o.id = l.id AND l.token_ready AND NOT l.target_over
                RETURNING o.tenant_id, o.id, o.target_id, o.provider_timestamp AS claimed_ts
            ), stamped AS (
                UPDATE targets t SET last_timestamp = GREATEST(t.last_timestamp, c.claimed_ts)
                  FROM claimed c WHERE t.tenant_id = c.tenant_id AND t.id = c.target_id
                RETURNING t.id
            ), parked AS (
                UPDATE operations o SET pending_reason = 'token_pending', updated_at = now()
                  FROM locked l
                 WHERE o.tenant_id = l.tenant_id AND o.id = l.id AND NOT l.token_ready AND NOT l.target_over
                RETURNING o.id
            )
            SELECT l.*, c.claimed_ts, (SELECT count(*) FROM stamped) AS n_stamped, (SELECT count(*) FROM parked) AS n_parked
              FROM locked l LEFT JOIN claimed c ON c.tenant_id = l.tenant_id AND c.id = l.id
            """, [worker, limit, max(1, perTenant ?? limit), String(rotation), leaseSeconds, nowS])
        var claimed: [DispatchOperation] = []
        var over: [DispatchOperation] = []
        for r in rows {
            let op = try DispatchOperation(row: r)
            if try r.bool("target_over") { over.append(op); continue }
            guard let ts = try r.optionalInt64("claimed_ts") else { continue }  // parked
            claimed.append(op.claimed(providerTimestamp: ts))
        }
        for op in over { try OperationStore.cancelQueued(c, tenantId: op.tenantId, targetId: op.targetId, reason: "target_ended") }
        return claimed
    }

    /// Extends the leases of `worker`'s in-flight sends (heartbeat). Returns how many it still holds.
    @discardableResult
    public static func heartbeat(_ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)],
                                 leaseSeconds: Double) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute("""
            UPDATE operations o SET lease_expires_at = now() + make_interval(secs => $2)
              FROM unnest($3::text[], $4::text[]) AS x(tenant_id, id)
             WHERE o.tenant_id = x.tenant_id AND o.id = x.id AND o.status = 'sending' AND o.lease_owner = $1
            """, [worker, leaseSeconds, PostgresTextArray(operations.map(\.tenantId)), PostgresTextArray(operations.map(\.id))])
    }

    /// Puts claimed operations that were never sent back in the queue (graceful shutdown):
    /// the attempt is not counted; the assigned timestamp stays.
    @discardableResult
    public static func unclaim(_ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)]) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute("""
            UPDATE operations o SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                   attempts = GREATEST(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now()
              FROM unnest($2::text[], $3::text[]) AS x(tenant_id, id)
             WHERE o.tenant_id = x.tenant_id AND o.id = x.id AND o.status = 'sending' AND o.lease_owner = $1
            """, [worker, PostgresTextArray(operations.map(\.tenantId)), PostgresTextArray(operations.map(\.id))])
    }

    // MARK: apply

    /// Applies `decision` to the operation (and its target, start target, installation and the
    /// quota) in the caller's transaction, if the operation is still as `guard` expects; false
    /// (nothing changed) when another worker took it over. `apnsId`: the `apns-id` of the
    /// attempt, stored unless the provider returned its own id. `usedToken`: the token the push
    /// went to (a dead-token effect only clears that token, not a newer one).
    @discardableResult
    public static func apply(_ c: PostgresConnection, _ op: DispatchOperation, _ d: DispatchDecision, guard g: DispatchApplyGuard,
                             apnsId: String?, usedToken: String?) throws -> Bool {
        let tenant = op.tenantId
        // Lock order as the write path: target, then its operations.
        guard let target = try c.query("SELECT status, push_token FROM targets WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
                                       [tenant, op.targetId]).first else { return false }
        let fence: String
        var params: [(any PostgresBindable)?] = [tenant, op.id]
        switch g {
        case .lease(let owner, let attempts):
            fence = "status = 'sending' AND lease_owner = $3 AND attempts = $4"; params += [owner, attempts]
        case .expiredLease:
            fence = "status = 'sending' AND lease_expires_at < now()"
        case .queued:
            fence = "status = 'queued'"
        }
        guard try !c.query("SELECT 1 FROM operations WHERE tenant_id = $1 AND id = $2 AND \(fence) FOR UPDATE", params).isEmpty else {
            return false
        }

        var failure: JSONValue?
        var providerId: String?
        var delay: Double = 0
        var pendingReason: String?
        switch d.operation {
        case .accepted(let pid): providerId = pid
        case .failed(let f):
            failure = .object(["code": .string(f.code), "message": .string(f.message),
                               "provider_status": f.providerStatus.map { .int(Int64($0)) } ?? .null,
                               "provider_reason": f.providerReason.map { .string($0) } ?? .null])
        case .requeue(let s, let reason): delay = s; pendingReason = reason
        case .unknown(let reason):
            failure = .object(["code": "OUTCOME_UNKNOWN", "message": .string(reason), "provider_status": .null, "provider_reason": .null])
        case .expired:
            failure = nil
        }
        let status = d.operation.status
        try c.execute("""
            UPDATE operations SET status = $3, failure = COALESCE($4::jsonb, failure), apns_id = COALESCE($5, $6, apns_id),
                   accepted_at = CASE WHEN $3 = 'accepted' THEN now() ELSE accepted_at END,
                   next_attempt_at = CASE WHEN $3 = 'queued' THEN now() + make_interval(secs => $7) ELSE next_attempt_at END,
                   pending_reason = $8, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            """, [tenant, op.id, status.rawValue, failure?.jsonString, providerId, apnsId, delay, pendingReason])

        if op.consumesQuota, let day = op.quotaDay {
            switch d.quota {
            case .consume: try QuotaStore.consume(c, tenantId: tenant, day: day)
            case .release: try QuotaStore.release(c, tenantId: tenant, day: day)
            case .none: break
            }
        }

        var targetChanged = 0
        var cancel = d.cancelQueued
        switch d.target {
        case .none: break
        case .startAccepted:
            targetChanged = try c.execute("""
                UPDATE targets SET status = CASE WHEN token_status = 'registered' THEN 'ready' ELSE 'token_pending' END, updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND status = 'starting'
                """, [tenant, op.targetId])
        case .ended(let reason):
            // A dead update token ends the target only while that token is still its token.
            let currentToken = try target.optionalString("push_token")
            let tokenStillCurrent = reason != "token_invalid" || currentToken == usedToken
            if tokenStillCurrent {
                targetChanged = try c.execute("""
                    UPDATE targets SET status = 'ended', end_reason = $3, ended_at = COALESCE(ended_at, now()),
                           token_status = CASE WHEN $3 = 'token_invalid' THEN 'invalid' ELSE token_status END, updated_at = now()
                     WHERE tenant_id = $1 AND id = $2 AND status NOT IN ('ended', 'creation_failed')
                    """, [tenant, op.targetId, reason])
            } else {
                cancel = nil
            }
        case .creationFailed:
            targetChanged = try c.execute("""
                UPDATE targets SET status = 'creation_failed', ended_at = COALESCE(ended_at, now()), updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND status NOT IN ('ended', 'creation_failed')
                """, [tenant, op.targetId])
        case .startUnknown:
            targetChanged = try c.execute("""
                UPDATE targets SET status = 'start_unknown', updated_at = now() WHERE tenant_id = $1 AND id = $2 AND status = 'starting'
                """, [tenant, op.targetId])
        }
        if let reason = cancel { try OperationStore.cancelQueued(c, tenantId: tenant, targetId: op.targetId, reason: reason) }

        switch d.deadToken {
        case .startTargetPending?:
            if let st = op.startTargetId {
                try c.execute("""
                    UPDATE start_targets SET status = CASE WHEN status = 'ready' THEN 'pending' ELSE status END,
                           push_to_start_token = NULL, updated_at = now()
                     WHERE tenant_id = $1 AND id = $2 AND push_to_start_token IS NOT DISTINCT FROM $3
                    """, [tenant, st, usedToken])
            }
        case .clearInstallationFCMToken?:
            let cleared = try c.execute("""
                UPDATE installations SET fcm_token = NULL, updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND fcm_token IS NOT DISTINCT FROM $3 AND fcm_token IS NOT NULL
                """, [tenant, op.installationId, usedToken])
            if cleared > 0 {
                let rows = try c.query("""
                    UPDATE targets SET token_status = 'pending',
                           status = CASE WHEN status = 'ready' THEN 'token_pending' ELSE status END, updated_at = now()
                     WHERE tenant_id = $1 AND installation_id = $2 AND status NOT IN ('ended', 'creation_failed')
                    RETURNING id
                    """, [tenant, op.installationId])
                try c.execute("""
                    UPDATE start_targets SET status = 'pending', updated_at = now()
                     WHERE tenant_id = $1 AND installation_id = $2 AND status = 'ready'
                    """, [tenant, op.installationId])
                for r in rows { try c.notify(OperationStore.eventsChannel, payload: try r.string("id")) }
            }
        case .endTarget?, nil:
            break
        }

        if status.isFinal || targetChanged > 0 {
            if status.isFinal { try c.notify(OperationStore.eventsChannel, payload: op.id) }
            try c.notify(OperationStore.eventsChannel, payload: op.targetId)
        }
        return true
    }

    /// One accepted result for `applyAccepted`.
    public struct Acceptance: Sendable {
        public let op: DispatchOperation
        public let providerId: String?
        public let apnsId: String?
        public init(op: DispatchOperation, providerId: String?, apnsId: String?) { self.op = op; self.providerId = providerId; self.apnsId = apnsId }
    }

    /// The common case in bulk: accepted operations whose decision touches nothing but the
    /// operation and the quota (accepted updates: `DispatchDecision` with `target == .none`,
    /// no cancel, no dead token). Same effect as `apply` for each, in three statements.
    /// Returns the ids applied (others were taken over by another worker: fenced off).
    public static func applyAccepted(_ c: PostgresConnection, _ items: [Acceptance], owner: String) throws -> Set<String> {
        guard !items.isEmpty else { return [] }
        let rows = try c.query("""
            UPDATE operations o SET status = 'accepted', accepted_at = now(), apns_id = COALESCE(NULLIF(x.provider_id, ''), NULLIF(x.apns_id, ''), o.apns_id),
                   pending_reason = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
              FROM unnest($2::text[], $3::text[], $4::text[]::int[], $5::text[], $6::text[]) AS x(tenant_id, id, attempts, provider_id, apns_id)
             WHERE o.tenant_id = x.tenant_id AND o.id = x.id
               AND o.status = 'sending' AND o.lease_owner = $1 AND o.attempts = x.attempts
            RETURNING o.tenant_id, o.id, o.target_id, o.consumes_quota, o.quota_day::text AS quota_day
            """, [owner, PostgresTextArray(items.map(\.op.tenantId)), PostgresTextArray(items.map(\.op.id)),
                  PostgresTextArray(items.map { String($0.op.attempts) }), PostgresTextArray(items.map { $0.providerId ?? "" }),
                  PostgresTextArray(items.map { $0.apnsId ?? "" })])
        var applied = Set<String>()
        var perDay: [String: (tenant: String, day: String, n: Int64)] = [:]
        var events: [String] = []
        for r in rows {
            let id = try r.string("id"), tenant = try r.string("tenant_id")
            applied.insert(id)
            events.append(id); events.append(try r.string("target_id"))
            if try r.bool("consumes_quota"), let day = try r.optionalString("quota_day") {
                perDay["\(tenant)|\(day)", default: (tenant, day, 0)].n += 1
            }
        }
        // Through QuotaStore, whatever its bookkeeping (counters, shards): one call per unit.
        for v in perDay.values {
            try QuotaStore.consume(c, tenantId: v.tenant, day: v.day, count: Int64(v.n))
        }
        if !events.isEmpty {
            for e in events { try c.notify(OperationStore.eventsChannel, payload: e) }  // sent after commit (Database.run)
        }
        return applied
    }

    // MARK: rescue and expiry

    /// `sending` operations whose lease expired (their worker died or hung), locked with their
    /// target (`SKIP LOCKED`). Apply `.leaseExpired` with guard `.expiredLease` in the same transaction.
    public static func expiredLeases(_ c: PostgresConnection, limit: Int) throws -> [DispatchOperation] {
        try c.query("""
            SELECT \(selectColumns)
            \(joins)
             WHERE o.status = 'sending' AND o.lease_expires_at < now()
             ORDER BY o.lease_expires_at LIMIT $1
               FOR UPDATE OF o, t SKIP LOCKED
            """, [limit]).map(DispatchOperation.init(row:))
    }

    /// Queued operations past their `expires_at`, locked with their target (`SKIP LOCKED`).
    /// Apply `.expired` with guard `.queued` in the same transaction.
    public static func expiredQueued(_ c: PostgresConnection, limit: Int) throws -> [DispatchOperation] {
        try c.query("""
            SELECT \(selectColumns)
            \(joins)
             WHERE o.status = 'queued' AND o.expires_at IS NOT NULL AND o.expires_at <= now()
             ORDER BY o.expires_at LIMIT $1
               FOR UPDATE OF o, t SKIP LOCKED
            """, [limit]).map(DispatchOperation.init(row:))
    }

    // MARK: token pending

    /// Un-parks `token_pending` operations whose token is registered now. Migration 0005's
    /// triggers do this the moment a token is stored; this sweep is the safety net.
    @discardableResult
    public static func unparkTokenPending(_ c: PostgresConnection) throws -> Int {
        try c.execute("""
            UPDATE operations o SET pending_reason = NULL, updated_at = now()
              FROM targets t
              JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
              LEFT JOIN start_targets s ON s.tenant_id = t.tenant_id AND s.id = t.start_target_id
             WHERE t.tenant_id = o.tenant_id AND t.id = o.target_id
               AND o.status = 'queued' AND o.pending_reason = 'token_pending' AND \(tokenReady)
            """)
    }

    // MARK: lifetime

    /// SPEC §5 "Activity lifetime": targets not over `lifetimeSeconds` (8 h) after `started_at`
    /// become `ended` with reason `system_expired`; their queued work is cancelled (quota
    /// released). Returns the (tenant, target) pairs ended.
    @discardableResult
    public static func endExpiredLifetimes(_ c: PostgresConnection, lifetimeSeconds: Double = WriteRules.activityLifetimeSeconds,
                                           limit: Int = 500) throws -> [(tenantId: String, targetId: String)] {
        let rows = try c.query("""
            SELECT tenant_id, id FROM targets
             WHERE status NOT IN ('ended', 'creation_failed') AND started_at <= now() - make_interval(secs => $1)
             ORDER BY started_at LIMIT $2
               FOR UPDATE SKIP LOCKED
            """, [lifetimeSeconds, limit])
        var out: [(tenantId: String, targetId: String)] = []
        for r in rows {
            let tenant = try r.string("tenant_id"), id = try r.string("id")
            try c.execute("""
                UPDATE targets SET status = 'ended', end_reason = 'system_expired', ended_at = COALESCE(ended_at, now()), updated_at = now()
                 WHERE tenant_id = $1 AND id = $2
                """, [tenant, id])
            try OperationStore.cancelQueued(c, tenantId: tenant, targetId: id, reason: "system_expired")
            try c.notify(OperationStore.eventsChannel, payload: id)
            out.append((tenant, id))
        }
        return out
    }

    // MARK: observation

    /// One tenant's queue: queued operations (`depth`, parked ones included) and the age in
    /// seconds of its oldest claimable head that is due (`oldestDueSeconds`, 0 when none is due).
    public struct TenantQueue: Sendable, Equatable {
        public let tenantId: String
        public let depth: Int
        public let oldestDueSeconds: Double
        public init(tenantId: String, depth: Int, oldestDueSeconds: Double) {
            self.tenantId = tenantId; self.depth = depth; self.oldestDueSeconds = oldestDueSeconds
        }
    }

    /// Every tenant with queued operations (one pass over the queue index plus `dispatch_heads`),
    /// for the per-tenant gauges (docs/delivery.md "Metrics").
    public static func tenantQueues(_ c: PostgresConnection) throws -> [TenantQueue] {
        try c.query("""
            SELECT COALESCE(q.tenant_id, h.tenant_id) AS tenant_id, COALESCE(q.n, 0) AS n,
                   COALESCE(EXTRACT(EPOCH FROM now() - h.oldest)::float8, 0) AS oldest
              FROM (SELECT tenant_id, count(*) AS n FROM operations WHERE status = 'queued' GROUP BY tenant_id) q
              FULL JOIN (SELECT tenant_id, min(due_at) AS oldest FROM dispatch_heads WHERE due_at <= now() GROUP BY tenant_id) h
                ON h.tenant_id = q.tenant_id
            """).map { r in TenantQueue(tenantId: try r.string("tenant_id"), depth: try r.int("n"), oldestDueSeconds: try r.double("oldest")) }
    }

    /// Queued operations over every tenant (the `liverelay_queue_depth` gauge).
    public static func queueDepth(_ c: PostgresConnection) throws -> Int {
        try c.query("SELECT count(*) AS n FROM operations WHERE status = 'queued'")[0].int("n")
    }
}
