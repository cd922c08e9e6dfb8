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

    /// The walk of a batch (round trip 2 of `expandBatch`): the next `batchSize` live fan-out
    /// members of `p`'s channel after `cursor` in id order, locked (`FOR UPDATE`), each with
    /// `id, channel_seq, op_seq, revision` and `live` (with `probeLiveness`; false otherwise,
    /// as `AND` short-circuits): the member has an operation queued or in flight, so a new one
    /// cannot be its head. One `operations_live` probe per member (`OFFSET 0`: a subplan, never
    /// a join over the tenant's queue). Sent inside `withWalkSettings`.
    static func walkStatement(_ p: Pending, after cursor: String, batchSize: Int, probeLiveness: Bool) -> PostgresStatement {
        PostgresStatement(
            """
            SELECT id, channel_seq, op_seq, revision,
                   $5::boolean AND EXISTS (SELECT 1 FROM operations p WHERE p.tenant_id = $1 AND p.target_id = targets.id
                                             AND p.status IN ('queued', 'sending') OFFSET 0) AS live
              FROM targets
             WHERE tenant_id = $1 AND channel_id = $2 AND delivery = 'fanout' AND status NOT IN ('ended', 'creation_failed') AND id > $3
             ORDER BY id LIMIT $4 FOR UPDATE
            """, [p.tenantId, p.channelId, cursor, batchSize, probeLiveness])
    }

    /// `statements` between two statements that price sequential scans and sorts out for them
    /// (`enable_seqscan`, `enable_sort` off with `set_config(…, true)`, like `SET LOCAL`) and
    /// then restore the transaction's own values: the walk (`walkStatement`) and the writes
    /// statement (`writesStatement`, which reads the batch's members again) must read
    /// `targets_channel_fanout` in id order and stop after the batch. The result of
    /// `statements[i]` is at index `i + 1` of the pipeline's results.
    ///
    /// Measured in deploy/bench/fanout (auto_explain, 100,000 members): early batches of the
    /// walk were planned as a sequential scan of `targets` with an external sort of every
    /// remaining member, 50–120 ms per batch of 500 against ~3 ms by the index, 5 of the 200
    /// batches of a measured wave, 27 MB of temporary files, and a walk whose cost grows with
    /// the square of the members. The planner expected far fewer members than the batch, so no
    /// early stop: the row-level security test was priced at 0.5 % of rows in the system
    /// scope. Migration 0035 fixed that estimate (docs/security.md "Row-level security and the
    /// planner"); the settings stay for statistics taken before a channel's members arrived.
    static func withWalkSettings(_ statements: [PostgresStatement]) -> [PostgresStatement] {
        [
            PostgresStatement(
                """
                SELECT set_config('lr.walk_seqscan', current_setting('enable_seqscan'), true),
                       set_config('lr.walk_sort', current_setting('enable_sort'), true),
                       set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true)
                """)
        ] + statements + [
            PostgresStatement(
                """
                SELECT set_config('enable_seqscan', current_setting('lr.walk_seqscan'), true),
                       set_config('enable_sort', current_setting('lr.walk_sort'), true)
                """)
        ]
    }

    /// One batch of channel operation `p`, in the caller's transaction, which it commits: locks
    /// it (`SKIP LOCKED`), marks older pending operations of its channel done (this walk delivers
    /// their alerts and supersedes their state), locks the next `batchSize` live fan-out members
    /// after the cursor, moves each member's state, revision, `op_seq` and `channel_seq` on,
    /// supersedes what its new operations replace in each member's queue
    /// (docs/write-semantics.md coalescing), inserts them, advances the cursor and sends
    /// `COMMIT`. `day`: the UTC quota day of the inserted state-bearing operations. `reserve`:
    /// asks a dispatcher of this process for up to n slots (docs/delivery.md "Claims at
    /// fan-out"; `FanoutClaim.begin`), called once the batch knows how many of its members have
    /// nothing queued or in flight; the first operation of such a member whose token is
    /// registered is then inserted as `sending` under the lent lease, up to the slots lent.
    ///
    /// Four round trips (docs/channels.md "Fan-out"): the lock; the members and the writes they
    /// need; the members' rows, the supersede probe and the insert (which also reads back what
    /// it inserted in flight); the rare supersede and priority-budget updates with the cursor
    /// and `COMMIT`. The expander is the fan-out's critical path, and on a busy machine each
    /// round trip also waits for a core. A skipped batch (another expander holds the channel
    /// operation, or it is no longer pending) sends nothing after the lock.
    /// - Throws: `PostgresError`.
    public static func expandBatch(
        _ c: PostgresConnection, _ p: Pending, batchSize: Int, day: String, reserve: ((Int) -> FanoutClaim?)? = nil
    ) throws -> BatchResult {
        // Round trip 1. The older pending operations are marked done only when the lock was taken.
        guard
            let head = try c.query(
                """
                WITH head AS (
                    SELECT fanout_cursor FROM channel_operations WHERE tenant_id = $1 AND id = $2 AND fanout_state = 'pending'
                       FOR UPDATE SKIP LOCKED
                ), older AS (
                    UPDATE channel_operations SET fanout_state = 'done', fanout_done_at = now(), updated_at = now()
                     WHERE tenant_id = $1 AND channel_id = $3 AND seq < $4 AND fanout_state = 'pending' AND EXISTS (SELECT 1 FROM head)
                )
                SELECT fanout_cursor FROM head
                """, [p.tenantId, p.id, p.channelId, p.seq]
            ).first
        else { return BatchResult(skipped: true) }
        // Keyset walk: `id > cursor` ('' before the first batch sorts below every id) is an index
        // condition of `targets_channel_fanout` in the statement's generic plan too; the former
        // `($3 IS NULL OR id > $3)` was not, so every batch re-read the channel from its first
        // member (215 ms per batch of 500 at 20,000 members: the walk was quadratic).
        let cursor = try head.optionalString("fanout_cursor") ?? ""
        // Round trip 2: the members, locked, and the channel writes newer than the lowest
        // watermark among them (read after the lock, so the watermarks cannot move).
        let r2 = try c.pipeline(
            withWalkSettings([
                walkStatement(p, after: cursor, batchSize: batchSize, probeLiveness: reserve != nil),
                writesStatement(p, after: cursor, batchSize: batchSize)
            ])
        ).get()
        let walked = r2[1], writes = r2[2]
        struct Member { let id: String; let watermark: Int64; let opSeq: Int64; let revision: Int64; let live: Bool }
        let ms = try walked.rows.map {
            Member(
                id: try $0.string("id"), watermark: try $0.int64("channel_seq"), opSeq: try $0.int64("op_seq"),
                revision: try $0.int64("revision"), live: try $0.bool("live"))
        }
        let done = ms.count < batchSize
        var inserted = 0
        var tail: [PostgresStatement] = []
        // The writes statement read the members again, in a snapshot of its own: a member that
        // joined in between can push a locked member out of its batch. When the locked members'
        // lowest watermark is below the one it used, the writes in between are read now (rare).
        var writeRows = writes.rows.filter { $0["id"] != nil }
        let usedLow = try writes.rows.first?.int64("low") ?? p.seq
        if let low = ms.map(\.watermark).min(), low < usedLow {
            writeRows += try c.query(
                """
                SELECT id, seq, kind, has_state, alert IS NOT NULL AS has_alert FROM channel_operations
                 WHERE tenant_id = $1 AND channel_id = $2 AND seq > $3 AND seq <= $4 ORDER BY seq
                """, [p.tenantId, p.channelId, low, min(usedLow, p.seq)])
        }
        var facts: [ChannelWriteFacts] = [], stateful: [String: Bool] = [:]
        for w in writeRows {
            let f = ChannelWriteFacts(
                id: try w.string("id"), seq: try w.int64("seq"), kind: PushEvent(rawValue: try w.string("kind")) ?? .update,
                hasAlert: try w.bool("has_alert"))
            facts.append(f); stateful[f.id] = try w.bool("has_state")
        }
        facts.sort { $0.seq < $1.seq }
        // Slots only for members whose first new operation can go now: asked for after the
        // members are known, so a batch holds no more than it can use.
        let claimable = ms.filter { !$0.live && $0.watermark < p.seq }.count
        let claim = claimable > 0 ? reserve?(claimable) : nil
        // Rows to insert and per-member summaries.
        var opIds: [String] = [], opTargets: [String] = [], opSeqs: [String] = [], opRevs: [String] = [], opCops: [String] = [],
            opClaim: [String] = []
        var slots = claim?.slots ?? 0
        var tIds: [String] = [], tOpSeq: [String] = [], tRev: [String] = [], tChSeq: [String] = [], tLastCop: [String] = [],
            tLastOp: [String] = [], tLastSeq: [String] = [], tLastKind: [String] = [], tLastState: [String] = []
        for m in ms where m.watermark < p.seq {
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
            // Round trip 3, in this order: the members' rows move on (so the insert reads each
            // member as a claim after the walk would: the target state a stateless send uses),
            // the probe for what the new operations supersede (before the insert: it only looks
            // below each member's new `seq`), and the insert.
            // With a claim, its planner settings first (`DispatchStore.claimSettings`: the read
            // of what the insert put in flight probes like a claim), for the rest of the transaction.
            let settings = claim.flatMap { $0.terms.settings.isEmpty ? nil : [PostgresStatement.localSettings($0.terms.settings)] } ?? []
            let insertedAt = Date()  // the lease starts about now (the insert's statement_timestamp)
            let r3 = try c.pipeline(
                settings + [
                    PostgresStatement(
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
                        ]),
                    supersedeProbe(
                        tenantId: p.tenantId, targets: tIds, lastOps: tLastOp, lastSeqs: tLastSeq, lastKinds: tLastKind, lastHasState: tLastState),
                    PostgresStatement(
                        insertSQL,
                        [
                            p.tenantId, day, PostgresTextArray(opIds), PostgresTextArray(opTargets), PostgresTextArray(opSeqs),
                            PostgresTextArray(opRevs), PostgresTextArray(opCops), PostgresTextArray(opClaim), claim?.terms.worker,
                            claim?.terms.leaseSeconds ?? 0, Timestamp.epochSeconds(Date())
                        ])
                ]
            ).get().suffix(3).map { $0 }
            inserted = opIds.count
            if let update = try supersedeUpdate(tenantId: p.tenantId, found: r3[1].rows) { tail.append(update) }
            var sending = 0
            if let claim {
                var ops: [DispatchOperation] = []
                var parsed: DispatchOperation.JSONParseCache? = [:]  // one channel write's state, parsed once
                for r in r3[2].rows {
                    var op = try DispatchOperation(row: r, cache: &parsed).stampedAtInsert()  // attempt 1 and the timestamp as inserted
                    op.claimedAt = r["claim_stamp"]
                    ops.append(op)
                }
                let (decided, update) = DispatchStore.priorityDecisions(ops, now: claim.terms.clock())
                if let update { tail.append(update) }
                claim.record(decided, insertedAt: insertedAt)
                sending = decided.count
            }
            // A wake-up for the fair claim only when something waits queued.
            if inserted > sending { try c.notify(OperationStore.dispatchChannel, payload: p.tenantId) }
        }
        // Round trip 4.
        tail.append(
            PostgresStatement(
                """
                UPDATE channel_operations SET fanout_cursor = COALESCE($3, fanout_cursor),
                       fanout_state = CASE WHEN $4::boolean THEN 'done' ELSE fanout_state END,
                       fanout_done_at = CASE WHEN $4::boolean THEN now() ELSE fanout_done_at END, updated_at = now()
                 WHERE tenant_id = $1 AND id = $2
                """, [p.tenantId, p.id, ms.last?.id, done]))
        _ = try c.pipeline(tail, commit: true).get()
        return BatchResult(members: ms.count, operations: inserted, done: done)
    }

    /// The second statement of round trip 2: the channel writes after the lowest watermark
    /// (`channel_seq`) of the batch's members, up to `p`'s, in commit order, each row also
    /// carrying that watermark as `low` (`p.seq` when no member is below it); always at least one
    /// row (with a null `id` when there are no writes), so the caller learns `low`.
    static func writesStatement(_ p: Pending, after cursor: String, batchSize: Int) -> PostgresStatement {
        PostgresStatement(
            """
            WITH low AS (
                SELECT COALESCE(min(m.channel_seq), $5) AS v FROM (
                    SELECT channel_seq FROM targets
                     WHERE tenant_id = $1 AND channel_id = $2 AND delivery = 'fanout' AND status NOT IN ('ended', 'creation_failed')
                       AND id > $3
                     ORDER BY id LIMIT $4) m
            )
            SELECT low.v AS low, w.id, w.seq, w.kind, w.has_state, w.has_alert
              FROM low LEFT JOIN LATERAL (
                   SELECT id, seq, kind, has_state, alert IS NOT NULL AS has_alert FROM channel_operations
                    WHERE tenant_id = $1 AND channel_id = $2 AND seq > low.v AND seq <= $5) w ON true
             ORDER BY w.seq
            """, [p.tenantId, p.channelId, cursor, batchSize, p.seq])
    }

    /// The batch's insert: one row per send (`$3`–`$7` parallel arrays: id, target, `seq`,
    /// revision, channel operation), `$8` "true" for a send to insert as `sending` (claims at
    /// fan-out) when the member has nothing queued or in flight (checked again here: this
    /// statement's snapshot is taken after the members' locks) and its token is registered (the claim's `tokenReady`, for an update or
    /// end: Android → the installation's FCM token, iOS → the activity's registered update
    /// token), with attempt 1, `$9`'s lease of `$10` seconds and the APNs `timestamp`
    /// max(`$11` now in Unix seconds, the target's clock + 1), also written to `target_clocks`.
    /// Returns the rows inserted in flight as the dispatcher's claim reads them
    /// (`DispatchStore.selectColumns`, each probe by primary key, `target_clocks` as before
    /// this statement: `DispatchOperation.stampedAtInsert` applies the stamp) and `claim_stamp`
    /// (their `sent_at`, which fences a return to the queue).
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
                    WHERE x.claim AND t.tenant_id = $1 AND t.id = x.target_id
                      AND NOT EXISTS (SELECT 1 FROM operations p WHERE p.tenant_id = $1 AND p.target_id = x.target_id
                                        AND p.status IN ('queued', 'sending') OFFSET 0)
                   OFFSET 0) r ON true
             ORDER BY x.target_id, x.seq
            RETURNING *
        ), stamped AS (
            INSERT INTO target_clocks AS k (tenant_id, target_id, last_timestamp)
            SELECT i.tenant_id, i.target_id, i.provider_timestamp FROM ins i WHERE i.status = 'sending'
            ON CONFLICT (tenant_id, target_id) DO UPDATE SET last_timestamp = EXCLUDED.last_timestamp
             WHERE k.last_timestamp < EXCLUDED.last_timestamp
        )
        SELECT \(DispatchStore.selectColumns), o.sent_at AS claim_stamp
          FROM ins o
          CROSS JOIN LATERAL (SELECT t.* FROM targets t WHERE t.tenant_id = o.tenant_id AND t.id = o.target_id OFFSET 0) t
          \(DispatchStore.probeJoins)
         WHERE o.status = 'sending'
        """

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
        let probe = supersedeProbe(
            tenantId: tenantId, targets: targets, lastOps: lastOps, lastSeqs: lastSeqs, lastKinds: lastKinds, lastHasState: lastHasState)
        if let update = try supersedeUpdate(tenantId: tenantId, found: try c.query(probe.sql, probe.params)) {
            try c.execute(update.sql, update.params)
        }
    }

    /// The first statement of `supersedeQueued` (same parameters): each member's queued
    /// operations that its newest send supersedes, as rows `(id, last_op)`.
    static func supersedeProbe(
        tenantId: String, targets: [String], lastOps: [String], lastSeqs: [String], lastKinds: [String], lastHasState: [String]
    ) -> PostgresStatement {
        PostgresStatement(
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
    }

    /// The second statement of `supersedeQueued`: the probe's rows `found` marked superseded by
    /// their `last_op`, by primary key; nil when the probe found nothing.
    /// - Throws: `PostgresError` when a row cannot be decoded.
    static func supersedeUpdate(tenantId: String, found: [PostgresRow]) throws -> PostgresStatement? {
        guard !found.isEmpty else { return nil }
        var by: [String: JSONValue] = [:]
        for r in found { by[try r.string("id")] = .string(try r.string("last_op")) }
        return PostgresStatement(
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
