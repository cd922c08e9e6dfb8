import Postgres

/// Keeps the planner's statistics of the hot tables in step with their size (docs/delivery.md
/// "Planner statistics").
///
/// Autovacuum analyzes a table once `autovacuum_analyze_threshold` + 10 % of its rows changed,
/// checked every `autovacuum_naptime` (1 min by default). A table analyzed while nearly empty
/// (a new installation, or a tenant whose first fan-out fills the queue) keeps estimates of one
/// row per tenant until then, and the bulk statements of the dispatcher and the fan-out expander
/// get plans that read a whole tenant's queue once per batch member (20 s for one batch of 500
/// in deploy/bench/fanout). `refresh` runs `ANALYZE` on a table as soon as its live row count
/// (`pg_stat_user_tables.n_live_tup`, kept current by the statistics system) has more than
/// doubled or halved since the planner last counted it (`pg_class.reltuples`), past
/// `minimumChange` rows. Steady churn is left to autovacuum.
public enum PlannerStatistics {
    /// The tables whose row estimates drive the dispatcher's and the expander's plans.
    public static let tables = ["operations", "dispatch_heads", "targets", "events", "channel_operations"]

    /// Rows a table must have gained or lost (and changed since its last analyze) before `refresh` analyzes it.
    public static let minimumChange = 1000

    /// Analyzes each table of `tables` whose size moved past the rule above; returns their names
    /// (in `tables` order). `ANALYZE` samples at most 300 × `default_statistics_target` rows, so
    /// one call costs tens of milliseconds per table whatever its size, and takes no lock that
    /// blocks reads or writes. A role that does not own a table gets PostgreSQL's warning and the
    /// table stays as it was.
    /// - Throws: `PostgresError`.
    @discardableResult
    public static func refresh(_ c: PostgresConnection) throws -> [String] {
        let stale = Set(
            try c.query(
                """
                SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class k ON k.oid = s.relid
                 WHERE s.relname = ANY($1::text[]) AND s.schemaname = current_schema() AND s.n_mod_since_analyze >= $2
                   AND (s.n_live_tup > 2 * GREATEST(k.reltuples, 0) + $2 OR 2 * s.n_live_tup + $2 < k.reltuples)
                """, [PostgresTextArray(tables), minimumChange]
            ).map { try $0.string("relname") })
        let analyzed = tables.filter(stale.contains)
        for table in analyzed { try c.execute("ANALYZE \(table)") }  // names from `tables` only
        return analyzed
    }
}
