import LiveRelayCore
import Postgres

/// Counts behind the per-tenant caps (docs/security.md "Per-tenant caps").
///
/// Live targets are read from `live_target_counts` (migration 0017): at most 64 counter rows
/// per tenant, kept exact by triggers on `targets`, so the check costs the same whatever the
/// tenant's number of live targets. Active installations are counted with a `LIMIT` at the
/// cap (at most `limit` index entries; registrations are rare next to starts). Concurrent
/// creations may each see one below the cap, so the cap can be exceeded by the number of
/// writes in flight at that moment; it bounds rows, it is not a quota to the unit.
public enum TenantCapStore {
    /// The statement `check` runs, for joining a pipelined round trip; its one row has the
    /// count `n` (bounded by `limit` for installations). Evaluate the result with `evaluate`.
    /// Parameters: the tenant id and `limit`.
    public static func statement(tenantId: String, _ resource: TenantLimits.Resource, limit: Int) -> PostgresStatement {
        PostgresStatement(sql(resource), [tenantId, limit])
    }

    /// Throws `TenantLimits.exceeded` (`409 INSTALLATION_LIMIT` / `409 TARGET_LIMIT`) when the
    /// count `statement` returned reached `limit`.
    public static func evaluate(_ r: PostgresResult, _ resource: TenantLimits.Resource, limit: Int) throws {
        try evaluate(count: try r.rows.first?.int("n") ?? 0, resource, limit: limit)
    }

    static func evaluate(count n: Int, _ resource: TenantLimits.Resource, limit: Int) throws {
        if n >= limit { throw TenantLimits.exceeded(resource, limit: limit, actual: n) }
    }

    static func sql(_ resource: TenantLimits.Resource) -> String {
        switch resource {
        case .installations:
            return "SELECT count(*) AS n FROM (SELECT 1 FROM installations WHERE tenant_id = $1 AND status = 'active' LIMIT $2) x"
        case .liveTargets:
            // $2 (the cap) is unused here but kept so both resources bind the same parameters.
            return "SELECT COALESCE(sum(live), 0)::bigint AS n FROM live_target_counts WHERE tenant_id = $1 AND $2::int IS NOT NULL"
        }
    }

    /// Throws `409 INSTALLATION_LIMIT` / `409 TARGET_LIMIT` when the tenant already has `limit`
    /// active installations / live targets (one statement, see `statement`).
    public static func check(_ c: PostgresConnection, tenantId: String, _ resource: TenantLimits.Resource, limit: Int) throws {
        try evaluate(count: try c.query(statement(tenantId: tenantId, resource, limit: limit)).first?.int("n") ?? 0, resource, limit: limit)
    }

    /// Adds one live target of `tenantId` to this session's counter row of `live_target_counts`
    /// (shard `pg_backend_pid() % 64`), as the insert trigger of `targets` does (migrations 0017,
    /// 0019): for a writer that inserts a live target with that trigger skipped
    /// (`WritePath.startWrites`, migration 0047).
    public static func liveTargetAdded(tenantId: String) -> PostgresStatement {
        PostgresStatement(
            """
            INSERT INTO live_target_counts AS c (tenant_id, shard, live) VALUES ($1, (pg_backend_pid() % 64)::smallint, 1)
            ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + 1
            """, [tenantId])
    }

    /// The tenant's live targets as counted by `live_target_counts` (tests compare it with the
    /// rows).
    public static func liveTargets(_ c: PostgresConnection, tenantId: String) throws -> Int {
        try c.query(sql(.liveTargets), [tenantId, 0])[0].int("n")
    }

    /// Live (not `ended`/`creation_failed`) local-start targets of installation `installationId`
    /// (remote starts are the tenant's servers' and count toward the tenant's cap only), counted
    /// up to `limit` (an index range of `targets_installation`, at most `limit` entries).
    /// Call with the installation's row locked (`FOR UPDATE`) so concurrent reservations of
    /// one installation count each other.
    /// - Throws: `TenantLimits.installationTargetsExceeded` (`409 TARGET_LIMIT`) when it holds
    ///   `limit` or more; `PostgresError`.
    public static func checkInstallationTargets(_ c: PostgresConnection, tenantId: String, installationId: String, limit: Int) throws {
        let n = try c.query(
            """
            SELECT count(*) AS n FROM (
              SELECT 1 FROM targets WHERE tenant_id = $1 AND installation_id = $2 AND origin = 'local'
                 AND status NOT IN ('ended', 'creation_failed') LIMIT $3) x
            """, [tenantId, installationId, limit])[0].int("n")
        if n >= limit { throw TenantLimits.installationTargetsExceeded(limit: limit, actual: n) }
    }
}
