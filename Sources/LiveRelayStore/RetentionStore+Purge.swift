import Foundation
import Postgres

/// What one retention purge removed (or, in a dry run, would remove).
public struct PurgeCounts: Sendable, Equatable {
    /// Terminal targets deleted.
    public var targets = 0
    /// Operations of those targets deleted.
    public var operations = 0
    /// Idempotency records deleted (past their expiry, or write keys older than the retention).
    public var idempotencyRecords = 0

    public init(targets: Int = 0, operations: Int = 0, idempotencyRecords: Int = 0) {
        self.targets = targets; self.operations = operations; self.idempotencyRecords = idempotencyRecords
    }
}

/// Row retention (docs/security.md "Retention"): a target that is `ended` or `creation_failed`
/// is deleted, with all its operations, `retentionDays` days after it ended; idempotency records
/// go when they expire (24 h) — and write keys, which are kept as long as their operation may
/// exist, one day after the retention. Runs in the system scope, in batches of `batchSize`
/// targets per transaction so no transaction holds many locks or runs long.
extension RetentionStore {
    /// Targets per purge transaction.
    public static let purgeBatchSize = 500

    /// Purges (or, with `dryRun`, counts) what is past retention at the database's clock.
    /// Throws `PostgresError` when a batch fails (the batches before it stay committed).
    public static func purge(
        _ db: Database, retentionDays: Int, dryRun: Bool = false,
        batchSize: Int = RetentionStore.purgeBatchSize
    ) throws -> PurgeCounts {
        var out = PurgeCounts()
        /// Terminal targets past retention; `t` is the table alias in front of each column.
        func terminalOld(_ t: String = "") -> String {
            "\(t)status IN ('ended', 'creation_failed') AND \(t)ended_at < now() - make_interval(days => $1)"
        }
        let idempotencyOld = """
            expires_at < now() OR created_at < now() - make_interval(days => $1 + 1)
            """
        if dryRun {
            return try db.system { c in
                let t = try c.query("SELECT count(*) AS n FROM targets WHERE \(terminalOld())", [retentionDays])[0].int("n")
                let o = try c.query(
                    """
                    SELECT count(*) AS n FROM operations o JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
                     WHERE \(terminalOld("t."))
                    """, [retentionDays])[0].int("n")
                let i = try c.query("SELECT count(*) AS n FROM idempotency_records WHERE \(idempotencyOld)", [retentionDays])[0].int("n")
                return PurgeCounts(targets: t, operations: o, idempotencyRecords: i)
            }
        }
        while true {
            let (targets, operations) = try db.system { c -> (Int, Int) in
                let rows = try c.query(
                    """
                    SELECT tenant_id, id FROM targets WHERE \(terminalOld())
                     ORDER BY ended_at LIMIT $2 FOR UPDATE SKIP LOCKED
                    """, [retentionDays, batchSize])
                if rows.isEmpty { return (0, 0) }
                let tenants = PostgresTextArray(try rows.map { try $0.string("tenant_id") })
                let ids = PostgresTextArray(try rows.map { try $0.string("id") })
                let ops = try c.execute(
                    """
                    DELETE FROM operations o USING unnest($1::text[], $2::text[]) AS d(tenant_id, id)
                     WHERE o.tenant_id = d.tenant_id AND o.target_id = d.id
                    """, [tenants, ids])
                let tgts = try c.execute(
                    """
                    DELETE FROM targets t USING unnest($1::text[], $2::text[]) AS d(tenant_id, id)
                     WHERE t.tenant_id = d.tenant_id AND t.id = d.id
                    """, [tenants, ids])
                return (tgts, ops)
            }
            out.targets += targets
            out.operations += operations
            if targets < batchSize { break }
        }
        while true {
            let n = try db.system { c in
                try c.execute(
                    """
                    DELETE FROM idempotency_records WHERE ctid IN (
                      SELECT ctid FROM idempotency_records WHERE \(idempotencyOld) LIMIT $2 FOR UPDATE SKIP LOCKED)
                    """, [retentionDays, batchSize * 10])
            }
            out.idempotencyRecords += n
            if n < batchSize * 10 { break }
        }
        out.idempotencyRecords += try db.system { c in
            try c.execute("DELETE FROM operator_idempotency_records WHERE expires_at < now()")
        }
        return out
    }
}
