import Foundation
import JSON
import LiveRelayCore
import Postgres

/// All SQL of the dispatcher (docs/write-semantics.md ordering/unknown outcomes, §8 responses, §9 workers).
/// Runs in the system scope (`Database.system`), except the claim statement of a claim at
/// commit (`claimStatement` through `CommitClaim`), which runs in the writing tenant's scope on
/// that tenant's rows only; every statement names `tenant_id` where it touches one tenant's rows.
public enum DispatchStore {
    static let selectColumns = """
        o.tenant_id, o.id, o.target_id, o.seq, o.kind, o.revision, o.has_state, o.state::text AS state, o.alert::text AS alert,
        o.stale_at, o.relevance_score, o.priority, o.expires_at, o.dismiss_at, o.consumes_quota, o.quota_day::text AS quota_day,
        o.attempts, o.created_at, o.provider_timestamp,
        t.installation_id, t.start_target_id, t.template_version, t.business_key, t.state::text AS target_state,
        t.status AS target_status, t.push_token,
        COALESCE(k.last_timestamp, 0) AS last_timestamp,
        i.platform, i.environment, i.app_id, i.fcm_token, s.push_to_start_token,
        o.sent_priority,
        \(PriorityBudgetSQL.windowColumn(of: "k.priority10_sends")),
        \(PriorityBudgetSQL.budget(installation: "i")) AS priority10_budget,
        (SELECT v.attributes_type FROM template_versions v
          WHERE v.tenant_id = t.tenant_id AND v.installation_id = t.installation_id AND v.id = t.template_version LIMIT 1) AS attributes_type,
        t.channel_id, (SELECT ch.apns_channel_id FROM channels ch
          WHERE ch.tenant_id = t.tenant_id AND ch.id = t.channel_id AND t.delivery = 'broadcast') AS input_push_channel
        """
    /// The target's row of `target_clocks` as `k` (its last APNs `timestamp` in Unix seconds and
    /// its priority-10 window in epoch milliseconds; migrations 0024, 0026), absent before its
    /// first claim. One primary-key probe per target row: `OFFSET 0` keeps the subquery from
    /// being flattened into a join the planner could turn into a scan of every clock.
    static let clockJoin = """
        LEFT JOIN LATERAL (SELECT c.last_timestamp, c.priority10_sends FROM target_clocks c
                            WHERE c.tenant_id = t.tenant_id AND c.target_id = t.id OFFSET 0) k ON true
        """
    /// What `selectColumns` reads beside the operation `o` and its target `t`: the target's
    /// installation `i`, start target `s` and clock `k`, each one primary-key probe per row
    /// (`LATERAL … OFFSET 0`: the probe stays a subquery the planner cannot move ahead of `t`).
    /// Written as joins, they let a plan made with stale statistics start from the tenant's
    /// installations and walk every target of each by `targets_installation`: one claim of 5
    /// heads read 505,050 target rows and ran 23.9 s (auto_explain in deploy/bench/fanout, right
    /// after 100,000 members were seeded), holding the claimed targets' locks the whole time.
    static let probeJoins = """
        JOIN LATERAL (SELECT i.* FROM installations i WHERE i.tenant_id = t.tenant_id AND i.id = t.installation_id OFFSET 0) i ON true
        LEFT JOIN LATERAL (SELECT s.push_to_start_token FROM start_targets s
                            WHERE s.tenant_id = t.tenant_id AND s.id = t.start_target_id OFFSET 0) s ON true
        \(clockJoin)
        """
    /// The operation `o`'s target `t` and everything `probeJoins` adds (the dispatcher's reads).
    static let targetJoins = """
        JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
        \(probeJoins)
        """
    static let joins = """
        FROM operations o
        \(targetJoins)
        """
    /// The operation is the head of its target's queue: no earlier non-final operation and
    /// nothing of the target in flight (at most one in flight per target, commit order). One
    /// `operations_live` probe per row: `OFFSET 0` keeps PostgreSQL from turning the `NOT
    /// EXISTS` into an anti-join, which a plan made with stale statistics ran as a merge over
    /// every live operation of the index.
    static let isHead = """
        NOT EXISTS (SELECT 1 FROM operations p WHERE p.tenant_id = o.tenant_id AND p.target_id = o.target_id
                      AND p.status IN ('queued', 'sending') AND (p.seq < o.seq OR p.status = 'sending') OFFSET 0)
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

    /// The distinct tenant ids of `tenantIds`, sorted, as the `tenant_id = ANY($n)` parameter of
    /// a statement keyed by operation ids (heartbeat, unclaim, `applyResults`).
    static func distinctTenants(_ tenantIds: [String]) -> PostgresTextArray { PostgresTextArray(Set(tenantIds).sorted()) }

    /// The token the push needs is registered.
    static let tokenReady = """
        (CASE WHEN i.platform = 'android' THEN i.fcm_token IS NOT NULL
              WHEN o.kind = 'start' THEN s.push_to_start_token IS NOT NULL
              ELSE t.push_token IS NOT NULL AND t.token_status = 'registered' END)
        """

    // MARK: claim

    /// Transaction settings of every claim (`Database.system(settings:)`, docs/delivery.md
    /// "Claims"): `random_page_cost = 1.1`, PostgreSQL's own suggestion for storage whose random
    /// reads cost little more than sequential ones ("Planner Cost Constants"), which is what a
    /// hot queue in shared buffers is. With the default 4, a claim of 512 heads beside a few
    /// tens of thousands of operations was planned as a hash join over a sequential scan of
    /// every operation (9 of the 22 ms its re-check-and-lock step took, EXPLAIN ANALYZE on 20,000
    /// operations), where 512 primary-key probes cost ~1.5 ms; the scan grows with the table
    /// until the default's cost model flips. The dispatcher runs its claim statements only in
    /// such transactions, so their own plans (custom or generic) use it; plans of trigger
    /// statements are cached per connection by whichever transaction first ran them.
    ///
    /// And `enable_seqscan = off`: every probe of a claim is keyed by a unique key, and a
    /// table analyzed while nearly empty (a tenant's first burst of targets) looks like one page,
    /// where a sequential scan costs less than an index probe; repeated per claimed row, that
    /// scan makes the claim quadratic in the table's real size. Sequential scans stay possible
    /// where no index serves a statement; transition tables and `unnest` are not affected.
    public static let claimSettings: [(String, String)] = [("random_page_cost", "1.1"), ("enable_seqscan", "off")]

    /// Claims up to `limit` due operations in one statement (docs/delivery.md "Claims"):
    /// candidates come from `dispatch_heads` (migration 0007: at most one row per target, the
    /// head of its queue in commit order), at most `perTenant` per tenant with due work, taken
    /// round robin across tenants (every tenant's first candidate before any tenant's second;
    /// ties between tenants broken by a hash of the tenant id and `rotation`, so no tenant is
    /// always first). Each candidate is re-checked and locked with its target (`FOR UPDATE OF
    /// o, t SKIP LOCKED`): token registered → marked `sending` under `worker`'s lease
    /// (`leaseSeconds`), attempt counted, APNs `timestamp` assigned (Unix seconds: max(now, the
    /// target's last timestamp in `target_clocks` + 1), kept on resends) on the operation and
    /// the target's clock; token missing →
    /// parked (`pending_reason = 'token_pending'`, its head row leaves the queue until a token
    /// trigger or the un-park sweep clears it); target over → its queued work cancelled.
    /// Call inside one transaction; returns the claimed operations (attempts include this one).
    public static func claim(
        _ c: PostgresConnection, worker: String, limit: Int, leaseSeconds: Double, now: Date,
        perTenant: Int? = nil, rotation: Int = 0
    ) throws -> [DispatchOperation] {
        try claimExamining(c, worker: worker, limit: limit, leaseSeconds: leaseSeconds, now: now, perTenant: perTenant, rotation: rotation)
            .claimed
    }

    /// `claim`, also returning how many heads it took a decision on (`examined`: claimed, parked
    /// or found over; heads other claimers held are not counted; `examined == limit` means the
    /// claim was cut by its limit, so there may be more due heads right away) and the operations
    /// it parked (`parked`, for `unparkIfTokenReady` once the claim has committed).
    ///
    /// `room`: for tenants named in it, how many heads this claim may take at most (capped by
    /// `perTenant`; 0 takes none); `otherRoom` (nil: `perTenant`): the same for every tenant
    /// not named. The dispatcher's share of outstanding slots per tenant (docs/delivery.md "Claims").
    public static func claimExamining(
        _ c: PostgresConnection, worker: String, limit: Int, leaseSeconds: Double, now: Date,
        perTenant: Int? = nil, rotation: Int = 0, room: [String: Int] = [:], otherRoom: Int? = nil
    ) throws -> (claimed: [DispatchOperation], examined: Int, parked: [(tenantId: String, id: String)]) {
        guard limit > 0 else { return ([], 0, []) }
        let each = max(1, perTenant ?? limit)
        let roomJSON = JSONValue.object(room.mapValues { .int(Int64(max(0, $0))) }).jsonString
        let rows = try c.query(
            fairClaimSQL,
            [worker, limit, each, String(rotation), leaseSeconds, Timestamp.epochSeconds(now), roomJSON, max(0, otherRoom ?? each)])
        return (try claimed(c, rows), rows.count, try parkedRows(rows))
    }

    /// The operations a claim statement's rows parked (token missing; target not over).
    static func parkedRows(_ rows: [PostgresRow]) throws -> [(tenantId: String, id: String)] {
        try rows.compactMap { r in
            guard try !r.bool("target_over"), try r.optionalInt64("claimed_ts") == nil else { return nil }
            return (try r.string("tenant_id"), try r.string("id"))
        }
    }

    /// Un-parks those of `operations` (parked by a claim that has committed) whose token is
    /// registered now; returns how many. Closes a race of the token triggers (migrations 0005,
    /// 0030): a claim reads the FCM and push-to-start tokens without locking their rows, so a
    /// token registered while the claim parks the operation, and committed first, un-parks
    /// nothing (its snapshot did not show the operation parked yet). Run after the claim's
    /// COMMIT, this sees every token committed before it; a token committed later finds the
    /// operation parked and un-parks it itself. Primary-key probes only (`probeJoins`, as the
    /// claim reads the tokens).
    @discardableResult
    public static func unparkIfTokenReady(_ c: PostgresConnection, operations: [(tenantId: String, id: String)]) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        // Targets locked before operations (`unparkSQL`): operations first deadlocked with writes.
        return try c.execute(
            unparkSQL(where: "o.tenant_id = ANY($1::text[]) AND o.id = ANY($2::text[])"),
            [distinctTenants(operations.map(\.tenantId)), PostgresTextArray(operations.map(\.id))])
    }

    /// Un-parks the parked (`token_pending`) queued operations matching `filter` (a condition
    /// on `o`) whose token is registered now: their targets are locked first, sorted (`FOR NO
    /// KEY UPDATE`), then the operations are updated, the order writes take (target, then its
    /// queued operations) and the order the statement's dispatch-head trigger needs anyway.
    /// Shared by `unparkIfTokenReady` and `unparkTokenPending`.
    static func unparkSQL(where filter: String) -> String {
        """
        WITH ready AS (
          SELECT o.tenant_id, o.id, o.target_id FROM operations o
            JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
            \(probeJoins)
           WHERE \(filter) AND o.status = 'queued' AND o.pending_reason = 'token_pending' AND \(tokenReady)
        ), locked AS (
          SELECT t.tenant_id, t.id FROM targets t
           WHERE (t.tenant_id, t.id) IN (SELECT r.tenant_id, r.target_id FROM ready r)
           ORDER BY t.tenant_id, t.id FOR NO KEY UPDATE OF t
        )
        UPDATE operations o SET pending_reason = NULL, updated_at = now()
          FROM ready r
         WHERE o.tenant_id = r.tenant_id AND o.id = r.id AND o.status = 'queued' AND o.pending_reason = 'token_pending'
           AND EXISTS (SELECT 1 FROM locked l WHERE l.tenant_id = r.tenant_id AND l.id = r.target_id)
        """
    }

    /// The fair claim statement (`claim`): `$1` worker, `$2` limit, `$3` per tenant, `$4`
    /// rotation (text), `$5` lease seconds, `$6` now (epoch seconds), `$7` a JSON object of
    /// tenant id → at most this many for that tenant, `$8` at most this many for a tenant not in
    /// `$7` (each also capped by `$3`). Internal for profiling.
    ///
    /// `due_tenants` walks the distinct tenants of `dispatch_heads` (one probe of
    /// `dispatch_heads_due` per tenant, whether or not its heads are due); the due test is the
    /// per-tenant `LATERAL`'s index range. With the due test in the walk, PostgreSQL 15 (no
    /// skip scan) read every index entry of a tenant whose heads were all in the future (in
    /// backoff) on each claim: one tenant's deferred backlog made every tenant's claim slower.
    static let fairClaimSQL = """
        WITH RECURSIVE due_tenants AS (  -- not `tenants`: the priority budget reads that table
            (SELECT h.tenant_id FROM dispatch_heads h ORDER BY h.tenant_id LIMIT 1)
          UNION ALL
            SELECT (SELECT h.tenant_id FROM dispatch_heads h WHERE h.tenant_id > w.tenant_id ORDER BY h.tenant_id LIMIT 1)
              FROM due_tenants w WHERE w.tenant_id IS NOT NULL
        ), candidates AS (
            SELECT x.tenant_id, x.target_id, x.operation_id,
                   row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.due_at, x.target_id) AS rn
              FROM due_tenants w CROSS JOIN LATERAL (
                   SELECT h.tenant_id, h.target_id, h.operation_id, h.due_at FROM dispatch_heads h
                    WHERE h.tenant_id = w.tenant_id AND h.due_at <= now() ORDER BY h.due_at
                    LIMIT LEAST($3, COALESCE(($7::jsonb ->> w.tenant_id)::int, $8))) x
             WHERE w.tenant_id IS NOT NULL
        ), picked AS (
            SELECT tenant_id, target_id, operation_id FROM candidates ORDER BY rn, hashtext(tenant_id || $4), operation_id LIMIT $2
        ), \(claimTail(operationKey: "o.tenant_id = p.tenant_id AND o.target_id = p.target_id AND o.id = p.operation_id"))
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
        try claimNamed(c, worker: worker, ids: ids, limit: limit, leaseSeconds: leaseSeconds, now: now).claimed
    }

    /// `claim(ids:)`, also returning the operations it parked (for `unparkIfTokenReady`).
    public static func claimNamed(
        _ c: PostgresConnection, worker: String, ids: [(tenantId: String, id: String)], limit: Int,
        leaseSeconds: Double, now: Date
    ) throws -> (claimed: [DispatchOperation], parked: [(tenantId: String, id: String)]) {
        guard limit > 0, !ids.isEmpty else { return ([], []) }
        let st = claimStatement(worker: worker, ids: ids, limit: limit, leaseSeconds: leaseSeconds, now: now)
        let rows = try c.query(st.sql, st.params)
        return (try claimed(c, rows), try parkedRows(rows))
    }

    /// The statement of `claim(ids:)` (same parameters), for callers that pipeline it (a claim
    /// at commit, docs/delivery.md "Claims at commit"); read its rows with `claimedRows`.
    public static func claimStatement(
        worker: String, ids: [(tenantId: String, id: String)], limit: Int, leaseSeconds: Double, now: Date
    ) -> PostgresStatement {
        PostgresStatement(
            """
            WITH picked AS (
                SELECT DISTINCT x.tenant_id, x.operation_id FROM unnest($2::text[], $3::text[]) AS x(tenant_id, operation_id) LIMIT $4
            ), \(claimTail(operationKey: "o.tenant_id = p.tenant_id AND o.id = p.operation_id"))
            """,
            [
                worker, PostgresTextArray(ids.map(\.tenantId)), PostgresTextArray(ids.map(\.id)), limit, leaseSeconds,
                Timestamp.epochSeconds(now)
            ])
    }

    /// Everything of a claim after `picked(tenant_id, operation_id)` (plus `target_id` when
    /// `operationKey` names it): re-check and lock
    /// (`$1` worker, `$5` lease seconds, `$6` now in epoch seconds), mark sending, stamp, park.
    /// The target's clock (`target_clocks`, migration 0024: a narrow row per target, so the stamp
    /// is a cheap HOT update) is written only when the new timestamp is above it (a resend keeps
    /// its timestamp, so its clock is not rewritten); the first claim of a target inserts it.
    ///
    /// Every row is reached from `picked` by primary key, in a fixed order (operation, then its
    /// target, then `probeJoins`), each step a `LATERAL` subquery the planner cannot reorder:
    /// the operation and the target are locked inside their own step (`FOR UPDATE SKIP LOCKED`;
    /// a skipped target drops the row, and its operation stays locked, unclaimed, until the claim
    /// commits). The claim's settings (`claimSettings`) keep each probe an index scan.
    /// `operationKey`: how the operation step finds `picked`'s row. The fair claim names the
    /// target too (`dispatch_heads` has it), so even a plan made with statistics that take the
    /// tenant's queue for one row cannot use an index by its tenant prefix alone: with
    /// `operations` analyzed at 1 row and 20,000 rows in it, the probe by `(tenant_id, id)` was
    /// planned as a scan of `operations_tenant_id_target_id_seq_key` by `tenant_id` (every
    /// operation of the tenant, per claimed row; EXPLAIN on a quiet cluster). Claims by id
    /// (`claim(ids:)`) have no target id to name. The `claimed` and `parked` updates find their
    /// rows by tenant, target and id for the same reason (with stale statistics, by `(tenant_id,
    /// id)` alone they were planned as a scan of the tenant's operations per locked row). The target step has the same weakness and no
    /// such cure: with `targets` analyzed at one row, PostgreSQL may probe it through the
    /// smaller `targets_start_target` index by `tenant_id` alone (every target of the tenant per
    /// claimed row) until `PlannerStatistics.refresh` re-analyzes it (within
    /// `statisticsSweepSeconds`); docs/delivery.md "Planner statistics".
    static func claimTail(operationKey: String) -> String {
        """
        locked AS (
            SELECT \(selectColumns), \(tokenReady) AS token_ready, t.status IN ('ended', 'creation_failed') AS target_over
              FROM picked p
              CROSS JOIN LATERAL (SELECT o.* FROM operations o
                                   WHERE \(operationKey) AND \(keyedStatus("o", "queued"))
                                     AND o.next_attempt_at <= now() AND COALESCE(o.pending_reason, '') <> 'token_pending'
                                     FOR UPDATE SKIP LOCKED) o
              CROSS JOIN LATERAL (SELECT t.* FROM targets t WHERE t.tenant_id = o.tenant_id AND t.id = o.target_id FOR UPDATE SKIP LOCKED) t
              \(probeJoins)
             WHERE \(isHead)
        ), claimed AS (
            UPDATE operations o SET status = 'sending', lease_owner = $1, lease_expires_at = statement_timestamp() + make_interval(secs => $5),
                   attempts = o.attempts + 1, sent_at = statement_timestamp(), pending_reason = NULL,
                   provider_timestamp = COALESCE(o.provider_timestamp, GREATEST($6::bigint, l.last_timestamp + 1)), updated_at = now()
              FROM locked l
             WHERE o.tenant_id = l.tenant_id AND o.target_id = l.target_id AND o.id = l.id AND l.token_ready AND NOT l.target_over
            RETURNING o.tenant_id, o.id, o.target_id, o.provider_timestamp AS claimed_ts
        ), stamped AS (
            INSERT INTO target_clocks AS k (tenant_id, target_id, last_timestamp)
            SELECT c.tenant_id, c.target_id, c.claimed_ts FROM claimed c
            ON CONFLICT (tenant_id, target_id) DO UPDATE SET last_timestamp = EXCLUDED.last_timestamp
             WHERE k.last_timestamp < EXCLUDED.last_timestamp
            RETURNING k.target_id
        ), parked AS (
            UPDATE operations o SET pending_reason = 'token_pending', updated_at = now()
              FROM locked l
             WHERE o.tenant_id = l.tenant_id AND o.target_id = l.target_id AND o.id = l.id AND NOT l.token_ready AND NOT l.target_over
            RETURNING o.id
        ), stamps AS (  -- id -> timestamp in one object: a join of two CTEs estimated at one row each was a nested loop (n^2)
            SELECT jsonb_object_agg(c.id, c.claimed_ts) AS m FROM claimed c
        )
        SELECT l.*, ((SELECT m FROM stamps) ->> l.id)::bigint AS claimed_ts, statement_timestamp() AS claim_stamp,
               (SELECT count(*) FROM stamped) AS n_stamped, (SELECT count(*) FROM parked) AS n_parked
          FROM locked l
        """
    }

    /// Rows of a claim statement → the claimed operations; targets found over get their queued work cancelled.
    static func claimed(_ c: PostgresConnection, _ rows: [PostgresRow]) throws -> [DispatchOperation] {
        let (claimed, over) = try claimedRows(rows)
        for op in over { try OperationStore.cancelQueued(c, tenantId: op.tenantId, targetId: op.targetId, reason: "target_ended") }
        return claimed
    }

    /// Rows of a claim statement → the operations claimed (`sending`, attempt and timestamp
    /// set) and those whose target was found over (left `queued`: the caller cancels them, see
    /// `claimed`); parked rows are in neither.
    public static func claimedRows(_ rows: [PostgresRow]) throws -> (claimed: [DispatchOperation], over: [DispatchOperation]) {
        var claimed: [DispatchOperation] = []
        var over: [DispatchOperation] = []
        var parsed: DispatchOperation.JSONParseCache? = [:]  // fan-out operations of one channel write share their state
        for r in rows {
            let op = try DispatchOperation(row: r, cache: &parsed)
            if try r.bool("target_over") { over.append(op); continue }
            guard let ts = try r.optionalInt64("claimed_ts") else { continue }  // parked
            var c = op.claimed(providerTimestamp: ts)
            c.claimedAt = r["claim_stamp"]  // the statement's timestamp, as its UPDATE wrote it to sent_at
            claimed.append(c)
        }
        return (claimed, over)
    }

    /// Extends the leases of `worker`'s in-flight sends (heartbeat). Returns how many it renewed.
    /// Operation ids are unique across tenants (`Identifier`), so `tenant_id = ANY … AND id = ANY`
    /// matches exactly the given pairs, without a join to the batch (see `keyedStatus`).
    /// Rows locked by someone else are skipped (`FOR NO KEY UPDATE SKIP LOCKED`, then updated
    /// by `ctid`, which cannot move while this statement holds the row's lock): a row an apply holds is being finished anyway, and waiting for it would hold
    /// every other renewed row's lock and stall the other appliers behind the heartbeat. A
    /// skipped lease is renewed by the next heartbeat (every `leaseSeconds / 3`).
    @discardableResult
    public static func heartbeat(
        _ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)],
        leaseSeconds: Double
    ) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute(
            """
            UPDATE operations o SET lease_expires_at = now() + make_interval(secs => $2)
             WHERE o.ctid = ANY(ARRAY(
                   SELECT p.ctid FROM operations p
                    WHERE p.tenant_id = ANY($3::text[]) AND p.id = ANY($4::text[]) AND p.status = 'sending' AND p.lease_owner = $1
                      FOR NO KEY UPDATE SKIP LOCKED))
            """,
            [
                worker, leaseSeconds, distinctTenants(operations.map(\.tenantId)),
                PostgresTextArray(operations.map(\.id))
            ])
    }

    /// Puts claimed operations that were never sent back in the queue (graceful shutdown, a
    /// claim whose COMMIT's outcome is unknown): the attempt is not counted; the assigned
    /// timestamp stays. Only `worker`'s `sending` rows are touched, and with `claimedAt` (the
    /// claim's `DispatchOperation.claimedAt`) only rows that claim wrote: so running it late, or
    /// twice, never returns a later claim of the same operation. Returns how many went back.
    @discardableResult
    public static func unclaim(
        _ c: PostgresConnection, worker: String, operations: [(tenantId: String, id: String)], claimedAt: String? = nil
    ) throws -> Int {
        guard !operations.isEmpty else { return 0 }
        return try c.execute(
            """
            UPDATE operations o SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                   attempts = GREATEST(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now()
             WHERE o.tenant_id = ANY($2::text[]) AND o.id = ANY($3::text[]) AND o.status = 'sending' AND o.lease_owner = $1
               AND ($4::timestamptz IS NULL OR o.sent_at = $4::timestamptz)
            """,
            [
                worker, distinctTenants(operations.map(\.tenantId)), PostgresTextArray(operations.map(\.id)), claimedAt
            ])
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
        // Targets first, sorted, then their operations (see `unparkIfTokenReady`).
        try c.execute(unparkSQL(where: "true"))
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
    }

    /// Every tenant with queued operations (one pass over the queue index plus `dispatch_heads`),
    /// for the per-tenant gauges and the `liverelay_queue_depth` total (docs/delivery.md
    /// "Metrics").
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

    /// Whether any of `targets` has a head in `dispatch_heads` that is due now: after an apply,
    /// whether its finished operations let a next one of their targets become claimable, so
    /// the fair claim is worth waking (docs/delivery.md "Wake-ups"). Target ids are unique
    /// across tenants (`Identifier`), so `= ANY` on both columns matches exactly the pairs,
    /// one primary-key probe each, without joining the batch.
    public static func anyDueHead(_ c: PostgresConnection, targets: [(tenantId: String, targetId: String)]) throws -> Bool {
        guard !targets.isEmpty else { return false }
        return try c.query(
            """
            SELECT EXISTS (SELECT 1 FROM dispatch_heads h
                            WHERE h.tenant_id = ANY($1::text[]) AND h.target_id = ANY($2::text[]) AND h.due_at <= now()) AS due
            """, [distinctTenants(targets.map(\.tenantId)), PostgresTextArray(Array(Set(targets.map(\.targetId))))])[0].bool("due")
    }
}
