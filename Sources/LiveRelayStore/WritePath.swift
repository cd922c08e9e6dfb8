import Foundation
import Crypto
import JSON
import LiveRelayCore
import Postgres

/// The statements of the write path (remote start, update, end), built to be sent in a few
/// libpq pipelines instead of one round trip each (docs/write-path.md "Round trips"):
///
/// 1. reads: `BEGIN` + settings (lazily begun transaction), the locked target (or start target),
///    its queued operations, the idempotency key's record (a start's claim), the day's quota
///    counters;
/// 2. writes: the target row, the operation row, the superseded operations, the target's
///    dispatch head (`refreshHead` for a start; an update's and an end's are parts of their one
///    statement, `writes`), the quota re-read;
/// 3. the idempotency record's stored response (an update's or an end's record, inserted with
///    it) and `COMMIT`; these join round trip 2 when the
///    write needs nothing from round trip 2's results to answer (no claim at commit, no quota
///    re-read): the response is then built before round trip 2 (`TargetWrite`,
///    `OperationStore.New.record`), docs/write-path.md "The response before round trip 2".
///
/// Each function returns a `PostgresStatement` (SQL always bound) and a decoder for its
/// result, so a handler can put statements of several stores into one pipeline. Every
/// statement filters by `tenant_id` (row-level security is the second wall).
public enum WritePath {
    // MARK: round trip 1 (reads, locks, claim)

    /// The target `id`, locked `FOR UPDATE` (serialises writes per target), with its
    /// installation's `platform`, the transaction's `now()` (the time every `now()` of the
    /// write's later statements stores) and, given `key` (endpoint and idempotency key), that
    /// key's record (`IdempotencyStore.lookupLateral`: read in the same statement, not claimed;
    /// decode with `IdempotencyStore.looked`). Decode the target with `target(_:)`.
    /// A record committed while this statement waited for the row lock is not seen (the join
    /// keeps the row it read first); the answer's insert then finds it and the write runs again
    /// (`IdempotencyStore.storeFailure`).
    public static func lockTarget(tenantId: String, id: String, key: (endpoint: String, key: String)? = nil) -> PostgresStatement {
        guard let key else { return PostgresStatement(lockTargetSQL, [tenantId, id]) }
        return PostgresStatement(lockTargetWithKeySQL, [tenantId, id, key.endpoint, key.key])
    }

    /// `lockTarget`'s statement, with `more` columns and `joins` (the key's record). The target's
    /// installation, tenant and clock are joined, one primary-key probe each, rather than read
    /// by the four subqueries of `TargetStore.columns` (two of them the same installation row):
    /// docs/write-path.md "The locking read joins its rows". They are left joins, so a missing
    /// row gives the NULLs the subqueries gave. Only the target is locked; the joined rows are
    /// read from the statement's snapshot, as the subqueries read them.
    private static func lockTargetSQL(more: String = "", joins: String = "") -> String {
        """
        SELECT \(TargetStore.storedColumns(of: "t")), \(PriorityBudgetSQL.windowColumn(of: "k.priority10_sends")),
               \(PriorityBudgetSQL.budget(installation: "i", tenant: "n")) AS priority10_budget,
               i.platform, now() AS write_now\(more)
          FROM targets t
          LEFT JOIN installations i ON i.tenant_id = t.tenant_id AND i.id = t.installation_id
          LEFT JOIN tenants n ON n.tenant_id = t.tenant_id
          LEFT JOIN target_clocks k ON k.tenant_id = t.tenant_id AND k.target_id = t.id\(joins)
         WHERE t.tenant_id = $1 AND t.id = $2 FOR UPDATE OF t
        """
    }

    private static let lockTargetSQL = lockTargetSQL()

    private static let lockTargetWithKeySQL = lockTargetSQL(
        more: ", idem.key_request_hash, idem.key_status_code, idem.key_response_body, idem.key_expired",
        joins: "\n  LEFT JOIN LATERAL (\(IdempotencyStore.lookupLateral(tenant: "$1", endpoint: "$3", key: "$4"))) idem ON true")

    /// The target, its installation's platform and the transaction's `now()` from
    /// `lockTarget`'s result (nil: no such target).
    public static func target(_ r: PostgresResult) throws -> (target: TargetRecord, platform: String, now: Date)? {
        guard let row = r.rows.first else { return nil }
        return (try TargetRecord(row: row), try row.string("platform"), try row.date("write_now"))
    }

    /// The target's queued (not yet sending) operations, oldest first, locked: what the new
    /// write may supersede (`WriteRules.superseded`). Decode with `queued(_:)`.
    public static func lockQueued(tenantId: String, targetId: String) -> PostgresStatement {
        PostgresStatement(
            """
            SELECT id, kind, has_state, alert IS NOT NULL AS has_alert,
                   CASE WHEN consumes_quota THEN quota_day::text END AS quota_day
              FROM operations
             WHERE tenant_id = $1 AND target_id = $2 AND status = 'queued' ORDER BY seq FOR UPDATE
            """, [tenantId, targetId])
    }

    /// The queued operations from `lockQueued`'s result.
    public static func queued(_ r: PostgresResult) throws -> [QueuedOperation] {
        try r.rows.map { row in
            guard let kind = PushEvent(rawValue: try row.string("kind")) else {
                throw PostgresError(kind: .decoding, message: "bad operation kind")
            }
            return QueuedOperation(
                id: try row.string("id"), kind: kind, hasState: try row.bool("has_state"), hasAlert: try row.bool("has_alert"),
                quotaDay: try row.optionalString("quota_day"))
        }
    }

    /// The start target for a remote start, with its installation and current template
    /// (`TargetStore.startTargetForStart`), locked `FOR SHARE`: concurrent starts from one
    /// start target proceed together, while a token registration, retirement or new template
    /// version (an UPDATE of the row) waits for them. Decode with `startTarget(_:)`.
    public static func lockStartTarget(tenantId: String, id: String) -> PostgresStatement {
        PostgresStatement(TargetStore.startTargetForStartSQL(lock: "FOR SHARE OF s"), [tenantId, id])
    }

    /// The start target from `lockStartTarget`'s result (nil: none).
    public static func startTarget(_ r: PostgresResult) throws -> StartTargetForStart? {
        try r.rows.first.map(TargetStore.decodeStartTarget)
    }

    /// Serialises reservations of one business instance for the rest of the transaction
    /// (`TargetStore.lockBusiness`).
    public static func lockBusiness(tenantId: String, key: String, generation: String) -> PostgresStatement {
        PostgresStatement("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", ["\(tenantId)|\(key)|\(generation)"])
    }

    /// The id of the target holding (business_key, business_generation), if any. Decode with `holder(_:)`.
    public static func businessHolder(tenantId: String, key: String, generation: String) -> PostgresStatement {
        PostgresStatement(
            "SELECT id FROM targets WHERE tenant_id = $1 AND business_key = $2 AND business_generation = $3",
            [tenantId, key, generation])
    }

    /// The holder id from `businessHolder`'s result.
    public static func holder(_ r: PostgresResult) throws -> String? { try r.rows.first?.string("id") }

    /// The day's quota counters, committed values (`QuotaStore.readSQL`). Decode with `quota(_:)`.
    public static func readQuota(tenantId: String, day: String) -> PostgresStatement {
        PostgresStatement(QuotaStore.readSQL, [tenantId, day])
    }

    /// (limit, reserved, used) from `readQuota`'s result.
    public static func quota(_ r: PostgresResult) throws -> (limit: Int64, reserved: Int64, used: Int64) {
        guard let row = r.rows.first else { throw PostgresError(kind: .decoding, message: "tenant row missing") }
        return try QuotaStore.decode(row)
    }

    // MARK: round trip 2 (writes)

    /// Commits a state-bearing write on the locked target: new revision and full snapshot,
    /// the next operation sequence number, optionally a new status; returns the changed columns
    /// (decode with `appliedTarget(_:to:)`). `seq` of the new operation is `opSeq + 1` of the
    /// locked row read before.
    /// `prefix`: the prefix of the returned columns' names (`TargetStore.changedColumns(prefix:)`);
    /// nil returns nothing.
    public static func applyState(
        tenantId: String, id: String, revision: Int64, state: JSONValue, sourceVersion: Int64?,
        staleAt: Date?, relevanceScore: Double?, status: TargetStatus?, prefix: String? = ""
    ) -> PostgresStatement {
        PostgresStatement(
            applyStateSQL.text(returningUnder: prefix),
            [tenantId, id, revision, state.jsonString, sourceVersion, staleAt, relevanceScore, status?.rawValue])
    }

    private static let applyStateSQL = TargetUpdateSQL(
        """
        UPDATE targets SET revision = $3, state = $4::jsonb, source_version = COALESCE($5, source_version),
               stale_at = COALESCE($6, stale_at), relevance_score = COALESCE($7, relevance_score),
               status = COALESCE($8, status), op_seq = op_seq + 1, updated_at = now()
         WHERE tenant_id = $1 AND id = $2
        """)

    /// An UPDATE of the locked target row (`applyState`, `bumpSeq`) with its texts that return
    /// the changed columns (`TargetStore.changedColumns`), unprefixed and under
    /// `writtenTargetPrefix`, built once.
    private struct TargetUpdateSQL {
        let bare: String
        let returning: String
        let returningPrefixed: String

        init(_ bare: String) {
            self.bare = bare
            returning = bare + "\nRETURNING " + TargetStore.changedColumns
            returningPrefixed = bare + "\nRETURNING " + TargetStore.changedColumns(prefix: WritePath.writtenTargetPrefix)
        }

        /// The text returning the changed columns under `prefix`, or nothing when nil.
        func text(returningUnder prefix: String?) -> String {
            switch prefix {
            case nil: return bare
            case "": return returning
            case WritePath.writtenTargetPrefix: return returningPrefixed
            case let p?: return bare + "\nRETURNING " + TargetStore.changedColumns(prefix: p)
            }
        }
    }

    /// `targetWrite`'s statement on the locked target `id` (`applyState` or `bumpSeq`);
    /// `prefix` as theirs.
    public static func statement(tenantId: String, id: String, _ w: TargetWrite, prefix: String? = "") -> PostgresStatement {
        switch w {
        case .state(let revision, let state, let sourceVersion, let staleAt, let relevanceScore, let status):
            return applyState(
                tenantId: tenantId, id: id, revision: revision, state: state, sourceVersion: sourceVersion, staleAt: staleAt,
                relevanceScore: relevanceScore, status: status, prefix: prefix)
        case .seq(let status):
            return bumpSeq(tenantId: tenantId, id: id, status: status, prefix: prefix)
        }
    }

    /// The prefix of the target's columns in the row of `writes`.
    static let writtenTargetPrefix = "target_"

    /// Round trip 2's writes of an update or an end as ONE statement
    /// (`PostgresStatement.combined`; docs/write-path.md "One statement for the writes"): the
    /// locked target's change (`targetWrite`), the operation `operation`, the supersede of the
    /// queued operations `victims` by it (`supersede`), `more` (the quota counters' net change,
    /// the stored response), and, when `refreshingHead`, the target's dispatch head
    /// (`headParts`, docs/write-path.md "The head in the same statement"): parts that read none
    /// of each other's rows. Returns one row, decoded by `written(_:to:)`; without
    /// `returningRows`, one row with nothing in it (for a write that answered before it ran:
    /// docs/write-path.md "Rows nobody reads").
    public static func writes(
        tenantId: String, target: TargetRecord, _ targetWrite: TargetWrite, operation: OperationStore.New, victims: [String],
        more: [PostgresStatement], refreshingHead: Bool = false, returningRows: Bool = true
    ) -> PostgresStatement {
        var parts = [
            statement(tenantId: tenantId, id: target.id, targetWrite, prefix: returningRows ? writtenTargetPrefix : nil),
            OperationStore.insertStatement(tenantId: tenantId, operation, returning: returningRows)
        ]
        if !victims.isEmpty { parts.append(supersede(tenantId: tenantId, targetId: target.id, ids: victims, by: operation.id)) }
        parts += more
        if refreshingHead {
            parts += headParts(tenantId: tenantId, targetId: target.id, victims: victims, operation: operation, at: parts.count)
        }
        return .combined(parts, select: returningRows ? "SELECT * FROM w1 CROSS JOIN w0" : "SELECT")
    }

    /// Whether an update or an end whose answer is built before round trip 2 (docs/write-path.md
    /// "The response before round trip 2") still asks for the rows its statement writes, to
    /// compare them with the built answer: on in debug builds, which run every test, off in
    /// release builds, where nothing reads them (docs/write-path.md "Rows nobody reads"). A test
    /// turns it off to run the statements a release build sends.
    nonisolated(unsafe) public static var checksBuiltAnswers: Bool = {
        #if DEBUG
        true
        #else
        false
        #endif
    }()

    /// The dispatch head of target `targetId` after this write, as three parts of the write's
    /// combined statement starting at part `index` (`w<index>`): the head, then the removal of
    /// the head row when the head is not claimable, then its upsert when it is. What
    /// `refreshHead` computes after the insert and the supersede, computed beside them: the
    /// statement's snapshot still shows the `victims` queued and not the new operation, so the
    /// head is the first queued or sending operation by `seq` other than the victims, or else
    /// the new operation (whose `seq` is above every other, and whose `next_attempt_at` is the
    /// transaction's `now()`, the column's default). The same snapshot as a statement of its
    /// own would have: the writer holds the target's row lock, and every change of its
    /// operations' status by another transaction (a claim, an applied result) takes that lock
    /// before it commits.
    static func headParts(
        tenantId: String, targetId: String, victims: [String], operation: OperationStore.New, at index: Int
    )
        -> [PostgresStatement]
    {
        let head = "w\(index)"
        return [
            PostgresStatement(
                """
                SELECT h.id, h.status, h.next_attempt_at, h.pending_reason
                  FROM ((SELECT o.id, o.status::text AS status, o.next_attempt_at, o.pending_reason, 0 AS rank FROM operations o
                          WHERE o.tenant_id = $1 AND o.target_id = $2 AND o.status IN ('queued', 'sending') AND o.id <> ALL($3::text[])
                          ORDER BY o.seq LIMIT 1)
                        UNION ALL
                        SELECT $4::text, $5::text, now(), $6::text, 1) h
                 ORDER BY h.rank LIMIT 1
                """,
                [
                    tenantId, targetId, PostgresTextArray(victims), operation.id, operation.status.rawValue, operation.pendingReason
                ]),
            PostgresStatement(
                """
                DELETE FROM dispatch_heads d
                 WHERE d.tenant_id = $1 AND d.target_id = $2
                   AND NOT EXISTS (SELECT 1 FROM \(head) h WHERE h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending')
                """, [tenantId, targetId]),
            PostgresStatement(
                """
                INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at)
                SELECT $1, $2, h.id, h.next_attempt_at FROM \(head) h
                 WHERE h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending'
                ON CONFLICT (tenant_id, target_id) DO UPDATE
                   SET operation_id = EXCLUDED.operation_id, due_at = lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at)
                 WHERE (dispatch_heads.operation_id, dispatch_heads.due_at)
                       IS DISTINCT FROM (EXCLUDED.operation_id, lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at))
                """, [tenantId, targetId])
        ]
    }

    /// The operation and the target (`locked`, as `lockTarget` read it, with the columns
    /// the write changed) from the row of `writes`.
    /// - Throws: `PostgresError(kind: .decoding)` when the row is missing or malformed.
    public static func written(_ r: PostgresResult, to locked: TargetRecord) throws -> (OperationRecord, TargetRecord) {
        guard let row = r.rows.first else { throw PostgresError(kind: .decoding, message: "written row missing") }
        return (try OperationRecord(row: row), try locked.applying(changed: row, prefix: writtenTargetPrefix))
    }

    /// Takes the next operation sequence number of the locked target without new state,
    /// optionally setting a status (a stateless end: `ending`); returns the changed columns
    /// (decode with `appliedTarget(_:to:)`).
    /// `prefix`: as `applyState`'s.
    public static func bumpSeq(tenantId: String, id: String, status: TargetStatus?, prefix: String? = "") -> PostgresStatement {
        PostgresStatement(bumpSeqSQL.text(returningUnder: prefix), [tenantId, id, status?.rawValue])
    }

    private static let bumpSeqSQL = TargetUpdateSQL(
        """
        UPDATE targets SET op_seq = op_seq + 1, status = COALESCE($3, status),
               updated_at = CASE WHEN $3::text IS NULL THEN updated_at ELSE now() END
         WHERE tenant_id = $1 AND id = $2
        """)

    /// Inserts a new remote target at revision 1 with `op_seq = 1` (its start operation's seq);
    /// returns the row, with `priority10Budget` (priority-10 sends per hour: the start target's,
    /// `StartTargetForStart.priority10Budget`, read in round trip 1) as its budget and an empty
    /// priority-10 window (a new target has no clock row yet): the two columns `TargetStore.columns`
    /// reads with subqueries (docs/write-path.md "A start reads its target's budget in round trip 1").
    public static func insertTarget(tenantId: String, _ n: TargetStore.New, priority10Budget: Int?) -> PostgresStatement {
        PostgresStatement(
            insertTargetSQL,
            [
                tenantId, n.id, n.installationId, n.startTargetId, n.createdByKeyId, n.origin, n.activityType, n.templateVersion,
                n.businessKey, n.businessGeneration, n.status.rawValue, n.state.jsonString, n.sourceVersion, n.staleAt,
                n.relevanceScore, n.tokenStatus, priority10Budget
            ])
    }

    /// `insertTarget`'s text, built once (every start sends it).
    private static let insertTargetSQL = """
        INSERT INTO targets (tenant_id, id, installation_id, start_target_id, created_by_key_id, origin, activity_type,
                             template_version, business_key, business_generation, status, revision, state, source_version,
                             stale_at, relevance_score, token_status, op_seq)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, $12::jsonb, $13, $14, $15, $16, 1)
        RETURNING \(TargetStore.storedColumns(of: nil)), '{}'::bigint[] AS priority10_sends, $17::int AS priority10_budget
        """

    /// Round trip 2's writes of a remote start as ONE statement (`PostgresStatement.combined`;
    /// docs/write-path.md "A start's writes in one statement"): the new target, returning its row
    /// with `priority10Budget` as `insertTarget` does (decode with `updatedTarget(_:)`); its start operation, returning nothing (its record is
    /// `operation.record(tenantId:now:)` with `now` the target's `created_at`: both default to the
    /// transaction's `now()`); and, when `withHead`, the target's dispatch head, which for a new
    /// target is its one operation, due at once (what `refreshHead` gives when that operation is
    /// queued and waits for no token, which `operation` must be). The operation's foreign key
    /// to the target is checked at the end of the statement, when the target's row is there.
    /// The statement also keeps what the insert triggers of its rows would: the tenant's live
    /// targets (+1 in this session's shard of `live_target_counts`) and, when the operation
    /// consumes quota, its reserved unit (`adjustReserved`), so it goes with the
    /// `writerRowsSetting` pair in the statement just before it, and `endOfWriterRows` just after
    /// it (docs/write-path.md "The writer's statement skips the triggers"), and with
    /// `writerSettings` naming `operation` for the transaction. `target` must be inserted live
    /// and without a channel (a channel join is a statement of its own), in a status that makes
    /// no event (`starting`).
    public static func startWrites(
        tenantId: String, target: TargetStore.New, priority10Budget: Int?, operation: OperationStore.New, withHead: Bool
    )
        -> PostgresStatement
    {
        precondition(target.status == .starting, "a start inserts its target `starting`: live, no event")
        precondition(operation.status == .queued, "a start's operation is queued: its unit is reserved")
        var parts = [
            insertTarget(tenantId: tenantId, target, priority10Budget: priority10Budget),
            OperationStore.insertStatement(tenantId: tenantId, operation, returning: false), TenantCapStore.liveTargetAdded(tenantId: tenantId)
        ]
        if operation.consumesQuota, let day = operation.quotaDay {
            parts.append(adjustReserved(tenantId: tenantId, day: day, by: 1))
        }
        if withHead {
            precondition(operation.pendingReason == nil, "a start's head is its operation, waiting for no token")
            parts.append(
                PostgresStatement(
                    "INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at) VALUES ($1, $2, $3, now())",
                    [tenantId, target.id, operation.id]))
        }
        return .combined(parts, select: "SELECT * FROM w0")
    }

    /// The target `locked` (as `lockTarget` read it, in this transaction) with the columns
    /// `applyState` or `bumpSeq` changed, from their result.
    /// The rest of the row cannot change under the lock (`TargetRecord.applying(changed:)`).
    /// - Throws: `PostgresError(kind: .decoding)` when the row is missing or malformed.
    public static func appliedTarget(_ r: PostgresResult, to locked: TargetRecord) throws -> TargetRecord {
        guard let row = r.rows.first else { throw PostgresError(kind: .decoding, message: "target row missing") }
        return try locked.applying(changed: row)
    }

    /// The target row returned by `insertTarget`.
    public static func updatedTarget(_ r: PostgresResult) throws -> TargetRecord {
        guard let row = r.rows.first else { throw PostgresError(kind: .decoding, message: "target row missing") }
        return try TargetRecord(row: row)
    }

    /// Inserts an operation (`OperationStore.insert`'s statement, without its NOTIFY: call
    /// `notifyQueued` after). Decode with `operation(_:)`.
    public static func insertOperation(tenantId: String, _ n: OperationStore.New) -> PostgresStatement {
        OperationStore.insertStatement(tenantId: tenantId, n)
    }

    /// The operation row returned by `insertOperation`.
    public static func operation(_ r: PostgresResult) throws -> OperationRecord {
        guard let row = r.rows.first else { throw PostgresError(kind: .decoding, message: "operation row missing") }
        return try OperationRecord(row: row)
    }

    /// Marks `ids` (queued operations of target `targetId`, locked in round trip 1) superseded
    /// by `by`; the quota trigger releases their reservations. The target condition keeps the
    /// cached generic plan bounded to that target's queue whatever index the planner picks: a
    /// session prepared while `operations` had no statistics otherwise scanned every queued
    /// operation of the tenant (docs/write-path.md "Profile").
    public static func supersede(tenantId: String, targetId: String, ids: [String], by: String) -> PostgresStatement {
        PostgresStatement(
            """
            UPDATE operations SET status = 'superseded', superseded_by = $4, updated_at = now()
             WHERE tenant_id = $1 AND target_id = $2 AND id = ANY($3::text[]) AND status = 'queued'
            """, [tenantId, targetId, PostgresTextArray(ids), by])
    }

    /// The setting that names the operation whose target's dispatch head the writer refreshes
    /// itself (`refreshHead`): the head triggers leave that operation's insert, and a supersede
    /// by it, to the writer (migration 0040, docs/write-path.md "Heads refreshed by the writer").
    public static let headByWriterSetting = "liverelay.head_by_writer"

    /// Names `operationId` in `headByWriterSetting` for the rest of the transaction (`SET
    /// LOCAL`), in one statement with the `other` settings of the write (a claim at commit's:
    /// `CommitClaim.settings(operationId:)`). Pipeline it before the operation's insert, and
    /// `refreshHead` after the insert and the supersede, or the head parts in the same
    /// statement (`writes(…refreshingHead: true)`), unless a claim at commit follows (the
    /// claim's trigger deletes the head row when it takes the operation, and `CommitClaim.read`
    /// refreshes it when it does not). The writer must hold its target's row lock (`lockTarget`)
    /// or have inserted the target in this transaction.
    public static func headByWriter(operationId: String, with other: [(String, String)] = []) -> PostgresStatement {
        .localSettings([(headByWriterSetting, operationId)] + other)
    }

    /// The setting that names the operation whose quota counting the writer does itself
    /// (`adjustReserved`): the quota triggers leave that operation's insert, and the rows a
    /// supersede by it changes, to the writer (migration 0041, docs/write-path.md "Quota kept by
    /// the writer").
    public static let quotaByWriterSetting = "liverelay.quota_by_writer"

    /// The `quotaByWriterSetting` pair naming `operationId` (in `writerSettings`).
    /// The writer then owes one `adjustReserved` per day of
    /// `WriteRules.reservationChanges(insertedDay:superseded:)`, after its insert and supersede.
    public static func quotaByWriter(operationId: String) -> (String, String) { (quotaByWriterSetting, operationId) }

    /// The `headByWriterSetting` and `quotaByWriterSetting` pairs naming `operationId`, for a
    /// write that sets them with its transaction's other settings
    /// (`PostgresConnection.addPendingSettings`), or in round trip 2 when the BEGIN had gone.
    public static func writerSettings(operationId: String) -> [(String, String)] {
        [(headByWriterSetting, operationId), quotaByWriter(operationId: operationId)]
    }

    /// The setting that tells the derived-state triggers the next statement's rows are all kept
    /// by their writer, so their `WHEN` clause skips the call (migration 0046, docs/write-path.md
    /// "The writer's statement skips the triggers"; migration 0047 for a start's insert
    /// triggers). Transaction-local, and live for ONE statement: the pair (value `on`;
    /// `writerRows(for:current:)` for an update or an end) goes in the statement just before
    /// the writes statement (`writes`, `startWrites`), in the same pipeline, and
    /// `endOfWriterRows` just after it unless COMMIT follows.
    public static let writerRowsSetting = "liverelay.writer_rows"

    /// The `writerRowsSetting` pair that turns the skip on (`on`, the value the triggers'
    /// `WHEN` clause compares with).
    public static let writerRowsOn = (writerRowsSetting, "on")

    /// The `writerRowsSetting` pair for the writes statement of `write` on a target whose status
    /// is `current`, or nil when that statement changes the target's status (an end moving it to
    /// `ending`). The rule is the conservative one that the statement alone shows: with the
    /// status kept, the target trigger has nothing to do, since the statement never changes a
    /// target's channel or delivery. The statement's operations rows (its operation's insert,
    /// the supersede by it) are the writer's named in `writerSettings`.
    public static func writerRows(for write: TargetWrite, current: TargetStatus) -> (String, String)? {
        let status: TargetStatus?
        switch write {
        case .state(_, _, _, _, _, let s), .seq(let s): status = s
        }
        return status == nil || status == current ? writerRowsOn : nil
    }

    /// Clears `writerRowsSetting`: the statement after a writes statement that is not followed
    /// by COMMIT, so no later statement of the transaction skips the triggers.
    public static var endOfWriterRows: PostgresStatement { .localSettings([(writerRowsSetting, "")]) }

    /// Adds `change` reserved units (negative: releases) to the session's shard row of the
    /// tenant's `day` (`YYYY-MM-DD`), as the quota triggers do (`QuotaStore.adjustReservedSQL`).
    public static func adjustReserved(tenantId: String, day: String, by change: Int64) -> PostgresStatement {
        PostgresStatement(QuotaStore.adjustReservedSQL, [tenantId, day, change])
    }

    /// Refreshes target `targetId`'s dispatch head from its queue, as
    /// `lr_dispatch_heads_refresh_set` does for one target without taking the target's lock
    /// again (the writer holds it): the head is the first queued or sending operation by `seq`;
    /// a row names it when it is queued and not waiting for a token, else the target has none.
    /// The row is due as `lr_head_due_at` says (migration 0040): at the head's
    /// `next_attempt_at`, or, when that has passed and the row already held an earlier time, at
    /// that earlier time, so a superseded head's place in its tenant's queue passes to the
    /// operation that superseded it.
    public static func refreshHead(tenantId: String, targetId: String) -> PostgresStatement {
        PostgresStatement(
            """
            WITH h AS (
              SELECT o.id, o.status, o.next_attempt_at, o.pending_reason FROM operations o
               WHERE o.tenant_id = $1 AND o.target_id = $2 AND o.status IN ('queued', 'sending')
               ORDER BY o.seq LIMIT 1
            ), gone AS (
              DELETE FROM dispatch_heads d
               WHERE d.tenant_id = $1 AND d.target_id = $2
                 AND NOT EXISTS (SELECT 1 FROM h WHERE h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending')
            )
            INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at)
            SELECT $1, $2, h.id, h.next_attempt_at FROM h
             WHERE h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending'
            ON CONFLICT (tenant_id, target_id) DO UPDATE
               SET operation_id = EXCLUDED.operation_id, due_at = lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at)
             WHERE (dispatch_heads.operation_id, dispatch_heads.due_at)
                   IS DISTINCT FROM (EXCLUDED.operation_id, lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at))
            """, [tenantId, targetId])
    }

    /// Records the wake-ups of a write (sent after commit by `Database`): the dispatchers for
    /// a queued operation, the events channel for each superseded operation and for a target
    /// whose status changed.
    /// `operationId`: the queued operation, named in the dispatch wake-up (`<tenant>:<operation>`,
    /// docs/delivery.md "Wake-ups") so a dispatcher in this process measures lag from the commit.
    public static func notify(
        _ c: PostgresConnection, tenantId: String, queued: Bool, superseded: [String], targetChanged: String?,
        operationId: String? = nil
    ) throws {
        if queued { try c.notify(OperationStore.dispatchChannel, payload: operationId.map { tenantId + ":" + $0 } ?? tenantId) }
        for id in superseded { try c.notify(OperationStore.eventsChannel, payload: id) }
        if let targetChanged { try c.notify(OperationStore.eventsChannel, payload: targetChanged) }
    }

    // MARK: round trip 3 (stored response + COMMIT)

    /// Stores the response of the claimed idempotency key (plain; write responses hold no secret).
    public static func complete(tenantId: String, endpoint: String, key: String, response: StoredResponse) -> PostgresStatement {
        PostgresStatement(
            """
            UPDATE idempotency_records SET status_code = $4, response_body = $5, response_sealed = NULL
             WHERE tenant_id = $1 AND endpoint = $2 AND key = $3
            """, [tenantId, endpoint, key, response.status, response.body])
    }
}

/// What a write on a locked target changes in its row (docs/write-path.md "The response before
/// round trip 2"): the statement (`WritePath.statement(tenantId:id:_:)`) and the record it
/// leaves (`TargetRecord.applying(_:now:)`) come from the same value, so a write can answer
/// before its statements ran.
public enum TargetWrite: Sendable {
    /// New state and revision (`WritePath.applyState`): nil options keep the row's value.
    case state(revision: Int64, state: JSONValue, sourceVersion: Int64?, staleAt: Date?, relevanceScore: Double?, status: TargetStatus?)
    /// Only the next operation sequence number and optionally a status (`WritePath.bumpSeq`).
    case seq(status: TargetStatus?)
}
