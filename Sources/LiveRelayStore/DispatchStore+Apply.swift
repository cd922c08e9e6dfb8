import Foundation
import JSON
import LiveRelayCore
import Postgres

/// Applying results (docs/delivery.md "Applying results"): the single-result `apply` with its
/// fence, the per-row target effects, and the bulk `applyResults` of the dispatcher's applier.
extension DispatchStore {
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
            UPDATE operations SET status = $3::text, failure = COALESCE($4::jsonb, failure), apns_id = COALESCE($5, $6, apns_id),
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

    /// Whether a decision changes anything beyond the operation row and the quota (target
    /// status, queued work, tokens, installation): `applyResults` locks such results' targets
    /// up front, sorted.
    public static func hasEffects(_ d: DispatchDecision) -> Bool { d.target != .none || d.cancelQueued != nil || d.deadToken != nil }

    /// Whether applying `d` for an operation whose target's channel is `channelId` (nil: not a
    /// channel member) locks rows that belong to no single target of the batch, in
    /// an order `applyResults` does not fix (docs/delivery.md "Applying results"): a dead
    /// push-to-start token (the start target, shared by its targets), a dead FCM token (the
    /// installation, every target and start target of it), or a status change of a channel
    /// member (its channel's member counts, one statement per result). Two such batches at once
    /// could lock in opposite orders, so the dispatcher applies them one at a time. Every other
    /// effect stays on the result's own target (locked up front, and no other batch holds an
    /// operation of it: at most one is in flight per target), its queued operations, and
    /// counters sharded by backend.
    public static func reachesBeyondTarget(channelId: String?, _ d: DispatchDecision) -> Bool {
        switch d.deadToken {
        case .startTargetPending?, .clearInstallationFCMToken?: return true
        case .endTarget?, nil: break
        }
        return channelId != nil && d.target != .none
    }

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
                    UPDATE targets SET status = 'ended', end_reason = $3::text, ended_at = COALESCE(ended_at, now()),
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
        let st = applyStatement(results, owner: owner)
        let updated = try c.query(st.sql, st.params)
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

    /// The one UPDATE of `applyResults` (internal for plan tests): every row of `results` still
    /// leased by `owner` on that attempt gets its decision's status, failure, `apns-id`, retry
    /// time and pending reason; returns `id` per row written.
    ///
    /// One relation, no join (docs/delivery.md "Applying results"): each row finds its values
    /// by its position in the batch (`$12`: a JSON object id → 1-based index, a parameter, so
    /// nothing is recomputed per row), so no plan can rescan the batch per row in flight. The
    /// rows are found by primary key: `status` is tested as `keyedStatus`, so the partial
    /// index of in-flight rows (`operations_sending`) cannot serve the statement. With it,
    /// PostgreSQL read every in-flight operation (and each dead version of one not yet
    /// vacuumed) to find the batch's: 728 index entries for 243 results in
    /// deploy/bench/fanout (auto_explain), and more the more is in flight.
    static func applyStatement(_ results: [Result], owner: String) -> PostgresStatement {
        let rows = results.map { OperationUpdate($0.op, $0.decision, apnsId: $0.apnsId) }
        let at = "($12::jsonb ->> o.id)::int"
        var positions: [String: JSONValue] = [:]
        for (i, r) in results.enumerated() { positions[r.op.id] = .int(Int64(i + 1)) }
        return PostgresStatement(
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
               AND \(keyedStatus("o", "sending")) AND o.lease_owner = $1
            RETURNING o.id
            """,
            [
                owner, PostgresTextArray(results.map(\.op.tenantId)), PostgresTextArray(results.map(\.op.id)),
                PostgresTextArray(results.map { String($0.op.attempts) }), PostgresTextArray(rows.map(\.status)),
                PostgresTextArray(rows.map { $0.failure ?? "" }), PostgresTextArray(rows.map { $0.providerId ?? "" }),
                PostgresTextArray(results.map { $0.apnsId ?? "" }), PostgresTextArray(rows.map { String($0.delay) }),
                PostgresTextArray(rows.map { $0.pendingReason ?? "" }), distinctTenants(results.map(\.op.tenantId)),
                JSONValue.object(positions).jsonString
            ])
    }
}
