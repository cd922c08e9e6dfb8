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
    /// The channel of a member (FCM `data.channel_id`, docs/channels.md), and — for an iOS 18+
    /// member's start — the APNs channel id sent as `input-push-channel`.
    public let channelId: String?
    public let inputPushChannel: String?
    /// Priority budget (docs/priority-budget.md): `sent_priority` as stored, the target's
    /// window (epoch ms) and budget (nil: Android) as claimed, and the decision the claim took
    /// (`DispatchStore.decidePriorities`) with its time in epoch ms.
    public let sentPriority: Int?
    public let priority10Sends: [Int64]
    public let priority10Budget: Int?
    public internal(set) var budgetDecision: PriorityBudget.Decision?
    public internal(set) var budgetDecidedAtMs: Int64?

    /// The `apns-priority` to send: the budget decision's, else the requested `priority`.
    public var sendPriority: Int { budgetDecision?.priority ?? priority }

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); id = try r.string("id"); targetId = try r.string("target_id"); seq = try r.int64("seq")
        guard let k = PushEvent(rawValue: try r.string("kind")) else { throw PostgresError(kind: .decoding, message: "bad operation kind") }
        kind = k
        revision = try r.int64("revision"); hasState = try r.bool("has_state")
        state = try r.optionalString("state").map { try JSONValue.parse($0, maxDepth: 128) }
        alert = try r.optionalString("alert").flatMap(PushAlert.init(jsonText:))
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
        channelId = try r.optionalString("channel_id"); inputPushChannel = try r.optionalString("input_push_channel")
        sentPriority = try r.optionalInt("sent_priority"); priority10Sends = try r.stringArray("priority10_sends").compactMap { Int64($0) }
        priority10Budget = try r.optionalInt("priority10_budget")
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
        channelId = o.channelId; inputPushChannel = o.inputPushChannel
        sentPriority = o.sentPriority; priority10Sends = o.priority10Sends; priority10Budget = o.priority10Budget
        budgetDecision = o.budgetDecision; budgetDecidedAtMs = o.budgetDecidedAtMs
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
        DispatchOperationFacts(
            kind: kind, hasState: hasState, hasAlert: alert != nil, consumesQuota: consumesQuota,
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

/// All SQL of the dispatcher (docs/write-semantics.md ordering/unknown outcomes, §8 responses, §9 workers).
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
        o.sent_priority, t.priority10_sends, \(PriorityBudgetSQL.budget(installation: "i")) AS priority10_budget,
        (SELECT v.attributes_type FROM template_versions v
          WHERE v.tenant_id = t.tenant_id AND v.installation_id = t.installation_id AND v.id = t.template_version LIMIT 1) AS attributes_type,
        t.channel_id, (SELECT ch.apns_channel_id FROM channels ch
          WHERE ch.tenant_id = t.tenant_id AND ch.id = t.channel_id AND t.delivery = 'broadcast') AS input_push_channel
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
    /// `o.status = '<status>'` for statements that join a batch (the `picked` heads of a claim, a
    /// fan-out's members) to operations, written so that no partial index on `status`
    /// (`operations_sending`, `operations_queue`) can serve it (docs/delivery.md "Applying
    /// results"): with such an index, and statistics that saw few rows in that status,
    /// PostgreSQL may scan every row in that status as the outer side of a nested loop and
    /// rescan the batch for each (a bulk apply of 512 results beside 3,584 in flight compared
    /// 1.8 million pairs, ~1 s), where the primary key finds each row once. The `|| ''` changes
    /// nothing but the plan. Statements keyed by ids alone avoid the join instead (`= ANY`).
    static func keyedStatus(_ alias: String, _ status: String) -> String { "\(alias).status || '' = '\(status)'" }

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
    public static func claim(
        _ c: PostgresConnection, worker: String, limit: Int, leaseSeconds: Double, now: Date,
        perTenant: Int? = nil, rotation: Int = 0
    ) throws -> [DispatchOperation] {
        guard limit > 0 else { return [] }
        let rows = try c.query(fairClaimSQL, [worker, limit, max(1, perTenant ?? limit), String(rotation), leaseSeconds, Timestamp.epochSeconds(now)])
        return try claimed(c, rows)
    }

    /// The fair claim statement (`claim`): `$1` worker, `$2` limit, `$3` per tenant, `$4`
    /// rotation (text), `$5` lease seconds, `$6` now (epoch seconds). Internal for profiling.
    static let fairClaimSQL = """
        WITH RECURSIVE due_tenants AS (  -- not `tenants`: the priority budget reads that table
            (SELECT h.tenant_id FROM dispatch_heads h WHERE h.due_at <= now() ORDER BY h.tenant_id LIMIT 1)
          UNION ALL
            SELECT (SELECT h.tenant_id FROM dispatch_heads h WHERE h.tenant_id > w.tenant_id AND h.due_at <= now()
                     ORDER BY h.tenant_id LIMIT 1)
              FROM due_tenants w WHERE w.tenant_id IS NOT NULL
        ), candidates AS (
            SELECT x.tenant_id, x.operation_id,
                   row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.due_at, x.target_id) AS rn
              FROM due_tenants w CROSS JOIN LATERAL (
                   SELECT h.tenant_id, h.target_id, h.operation_id, h.due_at FROM dispatch_heads h
                    WHERE h.tenant_id = w.tenant_id AND h.due_at <= now() ORDER BY h.due_at LIMIT $3) x
             WHERE w.tenant_id IS NOT NULL
        ), picked AS (
            SELECT tenant_id, operation_id FROM candidates ORDER BY rn, hashtext(tenant_id || $4), operation_id LIMIT $2
        ), \(claimTail)
        """

    /// Claims exactly the operations `ids` (docs/delivery.md "Wake-ups": the ones a commit in this
    /// process or a NOTIFY just named), at most `limit`, with the same re-check, locks and
    /// effects as `claim` but without looking at any other head: an id that is not (or no
    /// longer) the due, unparked head of its target is skipped, and stays for `claim`.
    /// Call inside one transaction; returns the claimed operations (attempts include this one).
    public static func claim(
        _ c: PostgresConnection, worker: String, ids: [(tenantId: String, id: String)], limit: Int,
        leaseSeconds: Double, now: Date
    ) throws -> [DispatchOperation] {
        guard limit > 0, !ids.isEmpty else { return [] }
        let rows = try c.query(
            """
            WITH picked AS (
                SELECT DISTINCT x.tenant_id, x.operation_id FROM unnest($2::text[], $3::text[]) AS x(tenant_id, operation_id) LIMIT $4
            ), \(claimTail)
            """,
            [
                worker, PostgresTextArray(ids.map(\.tenantId)), PostgresTextArray(ids.map(\.id)), limit, leaseSeconds,
                Timestamp.epochSeconds(now)
            ])
        return try claimed(c, rows)
    }

    /// Everything of a claim after `picked(tenant_id, operation_id)`: re-check and lock
    /// (`$1` worker, `$5` lease seconds, `$6` now in epoch seconds), mark sending, stamp, park.
    /// The target's `last_timestamp` is written only when the new timestamp is above it (a
    /// resend keeps its timestamp, so its target row is not rewritten).
    static let claimTail = """
        locked AS (
            SELECT \(selectColumns), \(tokenReady) AS token_ready, t.status IN ('ended', 'creation_failed') AS target_over
              FROM picked p
              JOIN operations o ON o.tenant_id = p.tenant_id AND o.id = p.operation_id
              JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
              JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
              LEFT JOIN start_targets s ON s.tenant_id = t.tenant_id AND s.id = t.start_target_id
             WHERE \(keyedStatus("o", "queued")) AND o.next_attempt_at <= now() AND COALESCE(o.pending_reason, '') <> 'token_pending'
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
              FROM claimed c WHERE t.tenant_id = c.tenant_id AND t.id = c.target_id AND t.last_timestamp < c.claimed_ts
            RETURNING t.id
        ), parked AS (
            UPDATE operations o SET pending_reason = 'token_pending', updated_at = now()
              FROM locked l
             WHERE o.tenant_id = l.tenant_id AND o.id = l.id AND NOT l.token_ready AND NOT l.target_over
            RETURNING o.id
        ), stamps AS (  -- id -> timestamp in one object: a join of two CTEs estimated at one row each was a nested loop (n^2)
            SELECT jsonb_object_agg(c.id, c.claimed_ts) AS m FROM claimed c
        )
        SELECT l.*, ((SELECT m FROM stamps) ->> l.id)::bigint AS claimed_ts,
               (SELECT count(*) FROM stamped) AS n_stamped, (SELECT count(*) FROM parked) AS n_parked
          FROM locked l
        """

    /// Rows of a claim statement → the claimed operations; targets found over get their queued work cancelled.
    static func claimed(_ c: PostgresConnection, _ rows: [PostgresRow]) throws -> [DispatchOperation] {
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
    /// Operation ids are unique across tenants (`Identifier`), so `tenant_id = ANY … AND id = ANY`
    /// matches exactly the given pairs, without a join to the batch (see `keyedStatus`).
    @discardableResult
    public static func heartbeat(
        _ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)],
        leaseSeconds: Double
    ) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute(
            """
            UPDATE operations o SET lease_expires_at = now() + make_interval(secs => $2)
             WHERE o.tenant_id = ANY($3::text[]) AND o.id = ANY($4::text[]) AND o.status = 'sending' AND o.lease_owner = $1
            """,
            [
                worker, leaseSeconds, PostgresTextArray(Array(Set(operations.map(\.tenantId))).sorted()),
                PostgresTextArray(operations.map(\.id))
            ])
    }

    /// Puts claimed operations that were never sent back in the queue (graceful shutdown):
    /// the attempt is not counted; the assigned timestamp stays.
    @discardableResult
    public static func unclaim(_ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)]) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute(
            """
            UPDATE operations o SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                   attempts = GREATEST(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now()
             WHERE o.tenant_id = ANY($2::text[]) AND o.id = ANY($3::text[]) AND o.status = 'sending' AND o.lease_owner = $1
            """,
            [
                worker, PostgresTextArray(Array(Set(operations.map(\.tenantId))).sorted()), PostgresTextArray(operations.map(\.id))
            ])
    }

    // MARK: apply

    /// Applies `decision` to the operation (and its target, start target, installation and the
    /// quota) in the caller's transaction, if the operation is still as `guard` expects; false
    /// (nothing changed) when another worker took it over. `apnsId`: the `apns-id` of the
    /// attempt, stored unless the provider returned its own id. `usedToken`: the token the push
    /// went to (a dead-token effect only clears that token, not a newer one).
    @discardableResult
    public static func apply(
        _ c: PostgresConnection, _ op: DispatchOperation, _ d: DispatchDecision, guard g: DispatchApplyGuard,
        apnsId: String?, usedToken: String?
    ) throws -> Bool {
        let tenant = op.tenantId
        // Lock order as the write path: target, then its operations.
        guard
            let target = try c.query(
                "SELECT status, push_token FROM targets WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
                [tenant, op.targetId]
            ).first
        else { return false }
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

        let row = OperationUpdate(op, d, apnsId: apnsId)
        try c.execute(
            """
            UPDATE operations SET status = $3, failure = COALESCE($4::jsonb, failure), apns_id = COALESCE($5, $6, apns_id),
                   accepted_at = CASE WHEN $3 = 'accepted' THEN now() ELSE accepted_at END,
                   next_attempt_at = CASE WHEN $3 = 'queued' THEN now() + make_interval(secs => $7) ELSE next_attempt_at END,
                   pending_reason = $8, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            """, [tenant, op.id, row.status, row.failure, row.providerId, apnsId, row.delay, row.pendingReason])
        if op.consumesQuota, let day = op.quotaDay {
            switch d.quota {
            case .consume: try QuotaStore.consume(c, tenantId: tenant, day: day)
            case .release: try QuotaStore.release(c, tenantId: tenant, day: day)
            case .none: break
            }
        }
        try applyEffects(c, op, d, usedToken: usedToken, currentToken: try target.optionalString("push_token"))
        return true
    }

    /// The operation-row values of a decision (shared by `apply` and `applyResults`).
    struct OperationUpdate {
        let status: String
        let failure: String?
        let providerId: String?
        let delay: Double
        let pendingReason: String?

        init(_ op: DispatchOperation, _ d: DispatchDecision, apnsId: String?) {
            var failure: JSONValue?
            var providerId: String?
            var delay: Double = 0
            var pendingReason: String?
            switch d.operation {
            case .accepted(let pid): providerId = pid
            case .failed(let f):
                failure = .object([
                    "code": .string(f.code), "message": .string(f.message),
                    "provider_status": f.providerStatus.map { .int(Int64($0)) } ?? .null,
                    "provider_reason": f.providerReason.map { .string($0) } ?? .null
                ])
            case .requeue(let s, let reason): delay = s; pendingReason = reason
            case .unknown(let reason):
                failure = .object(["code": "OUTCOME_UNKNOWN", "message": .string(reason), "provider_status": .null, "provider_reason": .null])
            case .expired:
                failure = nil
            }
            status = d.operation.status.rawValue
            self.failure = failure?.jsonString; self.providerId = providerId; self.delay = delay; self.pendingReason = pendingReason
        }
    }

    /// Whether a decision changes anything beyond the operation row and the quota.
    static func hasEffects(_ d: DispatchDecision) -> Bool { d.target != .none || d.cancelQueued != nil || d.deadToken != nil }

    /// A decision's effects on the target, its queued work, tokens and installation, plus the
    /// events NOTIFY, in the caller's transaction (target row locked). `currentToken`: the
    /// target's `push_token` as locked.
    static func applyEffects(
        _ c: PostgresConnection, _ op: DispatchOperation, _ d: DispatchDecision, usedToken: String?,
        currentToken: String?
    ) throws {
        let tenant = op.tenantId
        let status = d.operation.status
        var targetChanged = 0
        var cancel = d.cancelQueued
        switch d.target {
        case .none: break
        case .startAccepted:
            targetChanged = try c.execute(
                """
                UPDATE targets SET status = CASE WHEN token_status = 'registered' OR delivery = 'broadcast' THEN 'ready' ELSE 'token_pending' END,
                       updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND status = 'starting'
                """, [tenant, op.targetId])
        case .ended(let reason):
            // A dead update token ends the target only while that token is still its token.
            let tokenStillCurrent = reason != "token_invalid" || currentToken == usedToken
            if tokenStillCurrent {
                targetChanged = try c.execute(
                    """
                    UPDATE targets SET status = 'ended', end_reason = $3, ended_at = COALESCE(ended_at, now()),
                           token_status = CASE WHEN $3 = 'token_invalid' THEN 'invalid' ELSE token_status END, updated_at = now()
                     WHERE tenant_id = $1 AND id = $2 AND status NOT IN ('ended', 'creation_failed')
                    """, [tenant, op.targetId, reason])
            } else {
                cancel = nil
            }
        case .creationFailed:
            targetChanged = try c.execute(
                """
                UPDATE targets SET status = 'creation_failed', ended_at = COALESCE(ended_at, now()), updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND status NOT IN ('ended', 'creation_failed')
                """, [tenant, op.targetId])
        case .startUnknown:
            targetChanged = try c.execute(
                """
                UPDATE targets SET status = 'start_unknown', updated_at = now() WHERE tenant_id = $1 AND id = $2 AND status = 'starting'
                """, [tenant, op.targetId])
        }
        if let reason = cancel { try OperationStore.cancelQueued(c, tenantId: tenant, targetId: op.targetId, reason: reason) }

        switch d.deadToken {
        case .startTargetPending?:
            if let st = op.startTargetId {
                try c.execute(
                    """
                    UPDATE start_targets SET status = CASE WHEN status = 'ready' THEN 'pending' ELSE status END,
                           push_to_start_token = NULL, updated_at = now()
                     WHERE tenant_id = $1 AND id = $2 AND push_to_start_token IS NOT DISTINCT FROM $3
                    """, [tenant, st, usedToken])
            }
        case .clearInstallationFCMToken?:
            let cleared = try c.execute(
                """
                UPDATE installations SET fcm_token = NULL, updated_at = now()
                 WHERE tenant_id = $1 AND id = $2 AND fcm_token IS NOT DISTINCT FROM $3 AND fcm_token IS NOT NULL
                """, [tenant, op.installationId, usedToken])
            if cleared > 0 {
                let rows = try c.query(
                    """
                    UPDATE targets SET token_status = 'pending',
                           status = CASE WHEN status = 'ready' THEN 'token_pending' ELSE status END, updated_at = now()
                     WHERE tenant_id = $1 AND installation_id = $2 AND status NOT IN ('ended', 'creation_failed')
                    RETURNING id
                    """, [tenant, op.installationId])
                try c.execute(
                    """
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
    }

    /// One finished attempt for `applyResults`: the claimed operation, its decision, the
    /// attempt's `apns-id` and the token the push went to.
    public struct Result: Sendable {
        public let op: DispatchOperation
        public let decision: DispatchDecision
        public let apnsId: String?
        public let usedToken: String?
        public init(op: DispatchOperation, decision: DispatchDecision, apnsId: String?, usedToken: String?) {
            self.op = op; self.decision = decision; self.apnsId = apnsId; self.usedToken = usedToken
        }
    }

    /// Applies a batch of `owner`'s results in the caller's transaction, every outcome class in
    /// bulk (docs/delivery.md "Applying results"): the targets that get effects are locked first
    /// (sorted; the write path's order, target then operations), then one UPDATE writes every
    /// operation row still leased by `owner` on that attempt (others were taken over: fenced
    /// off), one call per (tenant, day) settles the quota, and only decisions with target
    /// effects (start accepted, ended, dead token, cancel) run per row. Same effect as `apply`
    /// with guard `.lease` for each. Returns the ids applied.
    public static func applyResults(_ c: PostgresConnection, _ results: [Result], owner: String) throws -> Set<String> {
        guard !results.isEmpty else { return [] }
        var tokens: [String: String?] = [:]
        let effectful = results.filter { hasEffects($0.decision) }
        if !effectful.isEmpty {
            let keys = Set(effectful.map { "\($0.op.tenantId)\u{1}\($0.op.targetId)" }).sorted()
            let pairs = keys.map { $0.split(separator: "\u{1}", omittingEmptySubsequences: false).map(String.init) }
            for r in try c.query(
                """
                SELECT t.tenant_id, t.id, t.push_token FROM targets t
                  JOIN unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(tenant_id, id, ord) ON t.tenant_id = x.tenant_id AND t.id = x.id
                 ORDER BY x.ord FOR UPDATE OF t
                """, [PostgresTextArray(pairs.map { $0[0] }), PostgresTextArray(pairs.map { $0[1] })])
            {
                tokens["\(try r.string("tenant_id"))\u{1}\(try r.string("id"))"] = .some(try r.optionalString("push_token"))
            }
        }
        let rows = results.map { OperationUpdate($0.op, $0.decision, apnsId: $0.apnsId) }
        // One relation, no join (docs/delivery.md "Applying results"): each row finds its values by
        // its position in the batch (`$12`: a JSON object id → 1-based index, a parameter, so
        // nothing is recomputed per row), so no plan can rescan the batch per row in flight,
        // whatever the statistics say about `sending` rows.
        let at = "($12::jsonb ->> o.id)::int"
        var positions: [String: JSONValue] = [:]
        for (i, r) in results.enumerated() { positions[r.op.id] = .int(Int64(i + 1)) }
        let updated = try c.query(
            """
            UPDATE operations o SET status = ($5::text[])[\(at)],
                   failure = COALESCE(NULLIF(($6::text[])[\(at)], '')::jsonb, o.failure),
                   apns_id = COALESCE(NULLIF(($7::text[])[\(at)], ''), NULLIF(($8::text[])[\(at)], ''), o.apns_id),
                   accepted_at = CASE WHEN ($5::text[])[\(at)] = 'accepted' THEN now() ELSE o.accepted_at END,
                   next_attempt_at = CASE WHEN ($5::text[])[\(at)] = 'queued'
                                          THEN now() + make_interval(secs => (($9::text[])[\(at)])::float8) ELSE o.next_attempt_at END,
                   pending_reason = NULLIF(($10::text[])[\(at)], ''), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
             WHERE o.tenant_id = ANY($11::text[]) AND o.id = ANY($3::text[]) AND $12::jsonb ? o.id
               AND o.tenant_id = ($2::text[])[\(at)] AND o.attempts::text = ($4::text[])[\(at)]
               AND o.status = 'sending' AND o.lease_owner = $1
            RETURNING o.id
            """,
            [
                owner, PostgresTextArray(results.map(\.op.tenantId)), PostgresTextArray(results.map(\.op.id)),
                PostgresTextArray(results.map { String($0.op.attempts) }), PostgresTextArray(rows.map(\.status)),
                PostgresTextArray(rows.map { $0.failure ?? "" }), PostgresTextArray(rows.map { $0.providerId ?? "" }),
                PostgresTextArray(results.map { $0.apnsId ?? "" }), PostgresTextArray(rows.map { String($0.delay) }),
                PostgresTextArray(rows.map { $0.pendingReason ?? "" }), PostgresTextArray(Array(Set(results.map(\.op.tenantId))).sorted()),
                JSONValue.object(positions).jsonString
            ])
        let applied = Set(try updated.map { try $0.string("id") })
        try recordPriority10Sends(c, results.filter { applied.contains($0.op.id) })
        // Through QuotaStore, whatever its bookkeeping (counters, shards): one call per (tenant, day, direction).
        var consume: [String: (tenant: String, day: String, n: Int64)] = [:], release = consume
        for r in results where applied.contains(r.op.id) && r.op.consumesQuota {
            guard let day = r.op.quotaDay else { continue }
            switch r.decision.quota {
            case .consume: consume["\(r.op.tenantId)|\(day)", default: (r.op.tenantId, day, 0)].n += 1
            case .release: release["\(r.op.tenantId)|\(day)", default: (r.op.tenantId, day, 0)].n += 1
            case .none: break
            }
        }
        for v in consume.values.sorted(by: { ($0.tenant, $0.day) < ($1.tenant, $1.day) }) {
            try QuotaStore.consume(c, tenantId: v.tenant, day: v.day, count: v.n)
        }
        for v in release.values.sorted(by: { ($0.tenant, $0.day) < ($1.tenant, $1.day) }) {
            try QuotaStore.release(c, tenantId: v.tenant, day: v.day, count: v.n)
        }
        for r in results where applied.contains(r.op.id) {
            if hasEffects(r.decision) {
                let current = tokens["\(r.op.tenantId)\u{1}\(r.op.targetId)"] ?? nil
                try applyEffects(c, r.op, r.decision, usedToken: r.usedToken, currentToken: current)
            } else if r.decision.operation.status.isFinal {
                try c.notify(OperationStore.eventsChannel, payload: r.op.id)  // sent after commit (Database.run)
                try c.notify(OperationStore.eventsChannel, payload: r.op.targetId)
            }
        }
        return applied
    }

    // MARK: rescue and expiry

    /// `sending` operations whose lease expired (their worker died or hung), locked with their
    /// target (`SKIP LOCKED`). Apply `.leaseExpired` with guard `.expiredLease` in the same transaction.
    public static func expiredLeases(_ c: PostgresConnection, limit: Int) throws -> [DispatchOperation] {
        try c.query(
            """
            SELECT \(selectColumns)
            \(joins)
             WHERE o.status = 'sending' AND o.lease_expires_at < now()
             ORDER BY o.lease_expires_at LIMIT $1
               FOR UPDATE OF o, t SKIP LOCKED
            """, [limit]
        ).map(DispatchOperation.init(row:))
    }

    /// Queued operations past their `expires_at`, locked with their target (`SKIP LOCKED`).
    /// Apply `.expired` with guard `.queued` in the same transaction.
    public static func expiredQueued(_ c: PostgresConnection, limit: Int) throws -> [DispatchOperation] {
        try c.query(
            """
            SELECT \(selectColumns)
            \(joins)
             WHERE o.status = 'queued' AND o.expires_at IS NOT NULL AND o.expires_at <= now()
             ORDER BY o.expires_at LIMIT $1
               FOR UPDATE OF o, t SKIP LOCKED
            """, [limit]
        ).map(DispatchOperation.init(row:))
    }

    // MARK: token pending

    /// Un-parks `token_pending` operations whose token is registered now. Migration 0005's
    /// triggers do this the moment a token is stored; this sweep is the safety net.
    @discardableResult
    public static func unparkTokenPending(_ c: PostgresConnection) throws -> Int {
        try c.execute(
            """
            UPDATE operations o SET pending_reason = NULL, updated_at = now()
              FROM targets t
              JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
              LEFT JOIN start_targets s ON s.tenant_id = t.tenant_id AND s.id = t.start_target_id
             WHERE t.tenant_id = o.tenant_id AND t.id = o.target_id
               AND o.status = 'queued' AND o.pending_reason = 'token_pending' AND \(tokenReady)
            """)
    }

    // MARK: lifetime

    /// docs/write-semantics.md "Activity lifetime": targets not over `lifetimeSeconds` (8 h) after `started_at`
    /// become `ended` with reason `system_expired`; their queued work is cancelled (quota
    /// released). Returns the (tenant, target) pairs ended.
    @discardableResult
    public static func endExpiredLifetimes(
        _ c: PostgresConnection, lifetimeSeconds: Double = WriteRules.activityLifetimeSeconds,
        limit: Int = 500
    ) throws -> [(tenantId: String, targetId: String)] {
        let rows = try c.query(
            """
            SELECT tenant_id, id FROM targets
             WHERE status NOT IN ('ended', 'creation_failed') AND started_at <= now() - make_interval(secs => $1)
             ORDER BY started_at LIMIT $2
               FOR UPDATE SKIP LOCKED
            """, [lifetimeSeconds, limit])
        var out: [(tenantId: String, targetId: String)] = []
        for r in rows {
            let tenant = try r.string("tenant_id"), id = try r.string("id")
            try c.execute(
                """
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
        try c.query(
            """
            SELECT COALESCE(q.tenant_id, h.tenant_id) AS tenant_id, COALESCE(q.n, 0) AS n,
                   COALESCE(EXTRACT(EPOCH FROM now() - h.oldest)::float8, 0) AS oldest
              FROM (SELECT tenant_id, count(*) AS n FROM operations WHERE status = 'queued' GROUP BY tenant_id) q
              FULL JOIN (SELECT tenant_id, min(due_at) AS oldest FROM dispatch_heads WHERE due_at <= now() GROUP BY tenant_id) h
                ON h.tenant_id = q.tenant_id
            """
        ).map { r in TenantQueue(tenantId: try r.string("tenant_id"), depth: try r.int("n"), oldestDueSeconds: try r.double("oldest")) }
    }

    /// Queued operations over every tenant (the `liverelay_queue_depth` gauge).
    public static func queueDepth(_ c: PostgresConnection) throws -> Int {
        try c.query("SELECT count(*) AS n FROM operations WHERE status = 'queued'")[0].int("n")
    }
}
