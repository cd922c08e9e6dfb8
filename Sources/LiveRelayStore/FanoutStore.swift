import Foundation
import JSON
import LiveRelayCore
import Postgres

/// The fan-out expander's SQL (docs/channels.md "Fan-out"): walks a channel's live fan-out
/// members in keyset order (`targets_channel_fanout`), in bounded batches, and inserts for each
/// the per-target operations `ChannelRules.fanoutSends` decides, with `channel_operation_id`
/// set, so they are claimed through `dispatch_heads` like every other operation (fair across
/// tenants). Runs in the system scope; every statement names `tenant_id`.
public enum FanoutStore {
    /// A channel operation whose fan-out is pending: the newest pending one of its channel.
    public struct Pending: Sendable, Equatable {
        public let tenantId: String
        public let id: String
        public let channelId: String
        public let seq: Int64
    }

    /// Up to `limit` channels with pending fan-out, each with its newest pending channel
    /// operation, taken round robin across tenants (every tenant's first channel before any
    /// tenant's second; ties broken by `rotation`).
    public static func pending(_ c: PostgresConnection, limit: Int, rotation: Int) throws -> [Pending] {
        try c.query(
            """
            WITH newest AS (
              SELECT DISTINCT ON (tenant_id, channel_id) tenant_id, id, channel_id, seq
                FROM channel_operations WHERE fanout_state = 'pending' ORDER BY tenant_id, channel_id, seq DESC
            )
            SELECT tenant_id, id, channel_id, seq FROM (
              SELECT n.*, row_number() OVER (PARTITION BY tenant_id ORDER BY channel_id) AS rn FROM newest n) x
             ORDER BY rn, hashtext(tenant_id || $2), channel_id LIMIT $1
            """, [limit, String(rotation)]
        ).map { r in
            Pending(tenantId: try r.string("tenant_id"), id: try r.string("id"), channelId: try r.string("channel_id"), seq: try r.int64("seq"))
        }
    }

    /// What one batch did.
    public struct BatchResult: Sendable, Equatable {
        /// Members walked in this batch.
        public var members: Int
        /// Per-target operations inserted.
        public var operations: Int
        /// The walk reached the last member: the channel operation's fan-out is done.
        public var done: Bool
        /// The batch did not run (another expander holds the channel operation, or it is no longer pending).
        public var skipped: Bool
        public init(members: Int = 0, operations: Int = 0, done: Bool = false, skipped: Bool = false) {
            self.members = members; self.operations = operations; self.done = done; self.skipped = skipped
        }
    }

    /// One batch of channel operation `p` in the caller's transaction: locks it (`SKIP LOCKED`),
    /// marks older pending operations of its channel done (this walk delivers their alerts and
    /// supersedes their state), locks the next `batchSize` live fan-out members after the
    /// cursor, inserts their operations, supersedes what those replace in each member's queue
    /// (docs/write-semantics.md coalescing), moves each member's state, revision, `op_seq` and
    /// `channel_seq` on, and advances the cursor. `day`: the UTC quota day of the inserted
    /// state-bearing operations. `claim`: slots a dispatcher of this process lent (docs/delivery.md
    /// "Claims at fan-out"): the first operation of a member with nothing queued or in flight
    /// and a registered token is inserted as `sending` under its lease, up to `claim.slots`.
    public static func expandBatch(
        _ c: PostgresConnection, _ p: Pending, batchSize: Int, day: String, claim: FanoutClaim? = nil
    ) throws -> BatchResult {
        guard
            let head = try c.query(
                """
                SELECT fanout_cursor FROM channel_operations WHERE tenant_id = $1 AND id = $2 AND fanout_state = 'pending'
                   FOR UPDATE SKIP LOCKED
                """, [p.tenantId, p.id]
            ).first
        else { return BatchResult(skipped: true) }
        // Keyset walk: `id > cursor` ('' before the first batch sorts below every id) is an index
        // condition of `targets_channel_fanout` in the statement's generic plan too; the former
        // `($3 IS NULL OR id > $3)` was not, so every batch re-read the channel from its first
        // member (215 ms per batch of 500 at 20,000 members: the walk was quadratic).
        let cursor = try head.optionalString("fanout_cursor")
        try c.execute(
            """
            UPDATE channel_operations SET fanout_state = 'done', fanout_done_at = now(), updated_at = now()
             WHERE tenant_id = $1 AND channel_id = $2 AND seq < $3 AND fanout_state = 'pending'
            """, [p.tenantId, p.channelId, p.seq])
        // `live` (only when claiming): the member has an operation queued or in flight, so a new
        // one cannot be its head. One `operations_live` probe per member (`OFFSET 0`: a subplan,
        // never a join over the tenant's queue); `$5` false skips it (AND short-circuits).
        let members = try c.query(
            """
            SELECT id, channel_seq, op_seq, revision,
                   $5::boolean AND EXISTS (SELECT 1 FROM operations p WHERE p.tenant_id = $1 AND p.target_id = targets.id
                                             AND p.status IN ('queued', 'sending') OFFSET 0) AS live
              FROM targets
             WHERE tenant_id = $1 AND channel_id = $2 AND delivery = 'fanout' AND status NOT IN ('ended', 'creation_failed')
               AND id > $3
             ORDER BY id LIMIT $4 FOR UPDATE
            """, [p.tenantId, p.channelId, cursor ?? "", batchSize, claim != nil])
        struct Member { let id: String; let watermark: Int64; let opSeq: Int64; let revision: Int64; let live: Bool }
        let ms = try members.map {
            Member(
                id: try $0.string("id"), watermark: try $0.int64("channel_seq"), opSeq: try $0.int64("op_seq"),
                revision: try $0.int64("revision"), live: try $0.bool("live"))
        }
        let done = ms.count < batchSize
        var inserted = 0
        if let low = ms.map(\.watermark).min(), low < p.seq {
            let writes = try c.query(
                """
                SELECT id, seq, kind, has_state, alert IS NOT NULL AS has_alert FROM channel_operations
                 WHERE tenant_id = $1 AND channel_id = $2 AND seq > $3 AND seq <= $4 ORDER BY seq
                """, [p.tenantId, p.channelId, low, p.seq])
            var facts: [ChannelWriteFacts] = [], stateful: [String: Bool] = [:]
            for w in writes {
                let f = ChannelWriteFacts(
                    id: try w.string("id"), seq: try w.int64("seq"), kind: PushEvent(rawValue: try w.string("kind")) ?? .update,
                    hasAlert: try w.bool("has_alert"))
                facts.append(f); stateful[f.id] = try w.bool("has_state")
            }
            // Rows to insert and per-member summaries.
            var opIds: [String] = [], opTargets: [String] = [], opSeqs: [String] = [], opRevs: [String] = [], opCops: [String] = [],
                opClaim: [String] = []
            var slots = claim?.slots ?? 0
            var tIds: [String] = [], tOpSeq: [String] = [], tRev: [String] = [], tChSeq: [String] = [], tLastCop: [String] = [],
                tLastOp: [String] = [], tLastSeq: [String] = [], tLastKind: [String] = [], tLastState: [String] = []
            for m in ms {
                var sends = ChannelRules.fanoutSends(watermark: m.watermark, writes: facts)
                if let last = sends.last, last.kind == .end { sends = [last] }  // an end supersedes every queued update anyway
                guard !sends.isEmpty else { continue }
                var seq = m.opSeq, rev = m.revision, lastId = ""
                // Only the first send of a member with nothing live can go at once (one in flight per target).
                let claimFirst = !m.live && slots > 0
                if claimFirst { slots -= 1 }
                for (k, s) in sends.enumerated() {
                    seq += 1
                    if stateful[s.id] == true { rev += 1 }
                    lastId = Identifier.make(.operation)
                    opIds.append(lastId); opTargets.append(m.id); opSeqs.append(String(seq)); opRevs.append(String(rev)); opCops.append(s.id)
                    opClaim.append(claimFirst && k == 0 ? "true" : "false")
                }
                tIds.append(m.id); tOpSeq.append(String(seq)); tRev.append(String(rev)); tChSeq.append(String(sends.last!.seq))
                tLastCop.append(sends.last!.id); tLastOp.append(lastId); tLastSeq.append(String(seq))
                tLastKind.append(sends.last!.kind.rawValue); tLastState.append(stateful[sends.last!.id] == true ? "true" : "false")
            }
            if !opIds.isEmpty {
                let rows = try c.query(
                    insertSQL,
                    [
                        p.tenantId, day, PostgresTextArray(opIds), PostgresTextArray(opTargets), PostgresTextArray(opSeqs),
                        PostgresTextArray(opRevs), PostgresTextArray(opCops), PostgresTextArray(opClaim), claim?.terms.worker,
                        claim?.terms.leaseSeconds ?? 0, Timestamp.epochSeconds(Date())
                    ])
                inserted = rows.count
                var sending: [(targetId: String, id: String)] = []
                for r in rows where try r.string("status") == "sending" { sending.append((try r.string("target_id"), try r.string("id"))) }
                try supersedeQueued(
                    c, tenantId: p.tenantId, targets: tIds, lastOps: tLastOp, lastSeqs: tLastSeq, lastKinds: tLastKind,
                    lastHasState: tLastState)
                try c.execute(
                    """
                    UPDATE targets t SET op_seq = x.op_seq, revision = x.revision, channel_seq = x.channel_seq,
                           state = CASE WHEN co.has_state THEN co.state ELSE t.state END,
                           stale_at = COALESCE(co.stale_at, t.stale_at), relevance_score = COALESCE(co.relevance_score, t.relevance_score),
                           status = CASE WHEN co.kind = 'end' AND t.status NOT IN ('ended', 'creation_failed') THEN 'ending' ELSE t.status END,
                           updated_at = now()
                      FROM unnest($2::text[], $3::text[]::bigint[], $4::text[]::bigint[], $5::text[]::bigint[], $6::text[])
                           AS x(id, op_seq, revision, channel_seq, cop)
                      JOIN channel_operations co ON co.tenant_id = $1 AND co.id = x.cop
                     WHERE t.tenant_id = $1 AND t.id = x.id
                    """,
                    [
                        p.tenantId, PostgresTextArray(tIds), PostgresTextArray(tOpSeq), PostgresTextArray(tRev), PostgresTextArray(tChSeq),
                        PostgresTextArray(tLastCop)
                    ])
                // Read as a claim would, after the members' rows moved on (the target state a stateless send uses).
                if let claim, !sending.isEmpty { try readClaimed(c, tenantId: p.tenantId, sending, claim: claim) }
                // A wake-up for the fair claim only when something waits queued.
                if inserted > sending.count { try c.notify(OperationStore.dispatchChannel, payload: p.tenantId) }
            }
        }
        try c.execute(
            """
            UPDATE channel_operations SET fanout_cursor = COALESCE($3, fanout_cursor),
                   fanout_state = CASE WHEN $4::boolean THEN 'done' ELSE fanout_state END,
                   fanout_done_at = CASE WHEN $4::boolean THEN now() ELSE fanout_done_at END, updated_at = now()
             WHERE tenant_id = $1 AND id = $2
            """, [p.tenantId, p.id, ms.last?.id, done])
        return BatchResult(members: ms.count, operations: inserted, done: done)
    }

    /// The batch's insert: one row per send (`$3`–`$7` parallel arrays: id, target, `seq`,
    /// revision, channel operation), `$8` "true" for a send to insert as `sending` (claims at
    /// fan-out) when the member's token is registered (the claim's `tokenReady`, for an update or
    /// end: Android → the installation's FCM token, iOS → the activity's registered update
    /// token), with attempt 1, `$9`'s lease of `$10` seconds and the APNs `timestamp`
    /// max(`$11` now in Unix seconds, the target's clock + 1), also written to `target_clocks`.
    /// Returns every inserted row's `id`, `target_id` and `status`.
    static let insertSQL = """
        WITH ins AS (
            INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, state, alert, stale_at,
                                    relevance_score, priority, expires_at, dismiss_at, consumes_quota, quota_day, channel_operation_id,
                                    attempts, lease_owner, lease_expires_at, sent_at, provider_timestamp)
            SELECT $1, x.id, x.target_id, x.seq, co.kind, CASE WHEN r.ready THEN 'sending' ELSE 'queued' END, x.revision, co.has_state,
                   CASE WHEN co.has_state THEN co.state END, co.alert, co.stale_at, co.relevance_score,
                   CASE WHEN co.priority = 1 THEN 5 ELSE co.priority END, co.expires_at, co.dismiss_at,
                   co.has_state, CASE WHEN co.has_state THEN $2::date END, co.id,
                   CASE WHEN r.ready THEN 1 ELSE 0 END, CASE WHEN r.ready THEN $9::text END,
                   CASE WHEN r.ready THEN statement_timestamp() + make_interval(secs => $10::float8) END,
                   CASE WHEN r.ready THEN statement_timestamp() END,
                   CASE WHEN r.ready THEN GREATEST($11::bigint, r.last_timestamp + 1) END
              FROM unnest($3::text[], $4::text[], $5::text[]::bigint[], $6::text[]::bigint[], $7::text[], $8::text[]::boolean[])
                   AS x(id, target_id, seq, revision, cop, claim)
              JOIN channel_operations co ON co.tenant_id = $1 AND co.id = x.cop
              LEFT JOIN LATERAL (
                   SELECT CASE WHEN i.platform = 'android' THEN i.fcm_token IS NOT NULL
                               ELSE t.push_token IS NOT NULL AND t.token_status = 'registered' END AS ready,
                          COALESCE((SELECT k.last_timestamp FROM target_clocks k WHERE k.tenant_id = t.tenant_id AND k.target_id = t.id), 0)
                            AS last_timestamp
                     FROM targets t JOIN LATERAL (SELECT i.* FROM installations i
                                                   WHERE i.tenant_id = t.tenant_id AND i.id = t.installation_id OFFSET 0) i ON true
                    WHERE x.claim AND t.tenant_id = $1 AND t.id = x.target_id OFFSET 0) r ON true
             ORDER BY x.target_id, x.seq
            RETURNING tenant_id, id, target_id, status, provider_timestamp
        ), stamped AS (
            INSERT INTO target_clocks AS k (tenant_id, target_id, last_timestamp)
            SELECT i.tenant_id, i.target_id, i.provider_timestamp FROM ins i WHERE i.status = 'sending'
            ON CONFLICT (tenant_id, target_id) DO UPDATE SET last_timestamp = EXCLUDED.last_timestamp
             WHERE k.last_timestamp < EXCLUDED.last_timestamp
        )
        SELECT id, target_id, status FROM ins
        """

    /// Reads what the batch inserted as `sending` (`sending`: target and operation ids) as the
    /// dispatcher's claim reads it (`DispatchStore.selectColumns`, each row reached by primary
    /// key), takes the priority-budget decisions (`DispatchStore.priorityDecisions`, applying
    /// its update when one changes a row) and records the result on `claim` for the hand-over.
    /// - Throws: `PostgresError`.
    static func readClaimed(_ c: PostgresConnection, tenantId: String, _ sending: [(targetId: String, id: String)], claim: FanoutClaim) throws {
        let rows = try c.query(
            """
            SELECT \(DispatchStore.selectColumns), o.sent_at AS claim_stamp
              FROM unnest($2::text[], $3::text[]) AS x(target_id, id)
              CROSS JOIN LATERAL (SELECT o.* FROM operations o
                                   WHERE o.tenant_id = $1 AND o.target_id = x.target_id AND o.id = x.id OFFSET 0) o
              CROSS JOIN LATERAL (SELECT t.* FROM targets t WHERE t.tenant_id = o.tenant_id AND t.id = o.target_id OFFSET 0) t
              \(DispatchStore.probeJoins)
            """, [tenantId, PostgresTextArray(sending.map(\.targetId)), PostgresTextArray(sending.map(\.id))])
        var ops: [DispatchOperation] = []
        for r in rows {
            var op = try DispatchOperation(row: r)  // attempts (1) and timestamp as inserted, the clock as stamped
            op.claimedAt = r["claim_stamp"]
            ops.append(op)
        }
        let (decided, update) = DispatchStore.priorityDecisions(ops, now: claim.terms.clock())
        if let update { try c.execute(update.sql, update.params) }
        claim.record(decided)
    }

    /// Coalescing in each member's own queue (docs/write-semantics.md): the newest state-bearing
    /// send of a member (`lastOps[i]`, kind `lastKinds[i]`, `lastHasState[i]` "true"/"false", at
    /// `lastSeqs[i]`) supersedes the member's older queued state-only updates; an end supersedes
    /// every older queued update and end. Arrays are parallel, one element per member in `targets`.
    ///
    /// Two statements, neither with a join the planner could reorder: planned with statistics
    /// taken before a fan-out filled the queue (every estimate one row), one statement that
    /// joined the batch to `operations` scanned the tenant's whole queue once per member (20 s
    /// for 500 members, auto_explain in deploy/bench/fanout). First a lateral probe per member
    /// (the batch is the only outer relation; `OFFSET 0` keeps the probe a subquery; the status
    /// test matches `operations_live` (tenant, target, seq) and no narrower queue index), then an
    /// update of exactly the ids found, by primary key.
    /// - Throws: `PostgresError`.
    static func supersedeQueued(
        _ c: PostgresConnection, tenantId: String, targets: [String], lastOps: [String], lastSeqs: [String], lastKinds: [String],
        lastHasState: [String]
    ) throws {
        let found = try c.query(
            """
            SELECT q.id, x.last_op
              FROM unnest($2::text[], $3::text[], $4::text[]::bigint[], $5::text[], $6::text[]::boolean[])
                   AS x(target_id, last_op, last_seq, last_kind, last_state)
             CROSS JOIN LATERAL (
                   SELECT p.id FROM operations p
                    WHERE p.tenant_id = $1 AND p.target_id = x.target_id AND p.seq < x.last_seq
                      AND p.status IN ('queued', 'sending') AND p.status <> 'sending'
                      AND ((x.last_kind = 'end' AND p.kind IN ('update', 'end'))
                           OR (x.last_kind = 'update' AND x.last_state AND p.kind = 'update' AND p.alert IS NULL))
                   OFFSET 0) q
            """,
            [
                tenantId, PostgresTextArray(targets), PostgresTextArray(lastOps), PostgresTextArray(lastSeqs), PostgresTextArray(lastKinds),
                PostgresTextArray(lastHasState)
            ])
        guard !found.isEmpty else { return }
        var by: [String: JSONValue] = [:]
        for r in found { by[try r.string("id")] = .string(try r.string("last_op")) }
        try c.execute(
            """
            UPDATE operations o SET status = 'superseded', superseded_by = $3::jsonb ->> o.id, updated_at = now()
             WHERE o.tenant_id = $1 AND o.id = ANY($2::text[]) AND \(DispatchStore.keyedStatus("o", "queued"))
            """, [tenantId, PostgresTextArray(by.keys.sorted()), JSONValue.object(by).jsonString])
    }

    /// Fan-out backlog for the metrics: channel operations with pending fan-out, and the age in
    /// seconds of the oldest (0 when none).
    public static func backlog(_ c: PostgresConnection) throws -> (pending: Int, oldestSeconds: Double) {
        let r = try c.query(
            """
            SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) AS oldest
              FROM channel_operations WHERE fanout_state = 'pending'
            """)[0]
        return (try r.int("n"), try r.double("oldest"))
    }
}
