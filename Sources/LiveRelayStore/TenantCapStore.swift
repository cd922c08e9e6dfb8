import LiveRelayCore
import Postgres

/// Counts behind the per-tenant caps (docs/security.md "Per-tenant caps"). A count stops at
/// the cap (`LIMIT`), so a check costs at most `limit` index entries. Concurrent creations may
/// each see one below the cap, so the cap can be exceeded by the number of writes in flight at
/// that moment; it bounds rows, it is not a quota to the unit.
public enum TenantCapStore {
    /// Throws `409 INSTALLATION_LIMIT` / `409 TARGET_LIMIT` when the tenant already has `limit`
    /// active installations / live targets.
    /// The statement `check` runs, for joining a pipelined round trip; its one row has the
    /// bounded count `n`. Evaluate the result with `evaluate`.
    public static func statement(tenantId: String, _ resource: TenantLimits.Resource, limit: Int) -> PostgresStatement {
        PostgresStatement(sql(resource), [tenantId, limit])
    }

    /// Throws `TenantLimits.exceeded` when the count `statement` returned reached `limit`.
    public static func evaluate(_ r: PostgresResult, _ resource: TenantLimits.Resource, limit: Int) throws {
        let n = try r.rows.first?.int("n") ?? 0
        if n >= limit { throw TenantLimits.exceeded(resource, limit: limit, actual: n) }
    }

    static func sql(_ resource: TenantLimits.Resource) -> String {
        switch resource {
        case .installations:
            return "SELECT count(*) AS n FROM (SELECT 1 FROM installations WHERE tenant_id = $1 AND status = 'active' LIMIT $2) x"
        case .liveTargets:
            return "SELECT count(*) AS n FROM (SELECT 1 FROM targets WHERE tenant_id = $1 AND status NOT IN ('ended', 'creation_failed') LIMIT $2) x"
        }
    }

    public static func check(_ c: PostgresConnection, tenantId: String, _ resource: TenantLimits.Resource, limit: Int) throws {
        let sql: String
        switch resource {
        case .installations:
            sql = "SELECT count(*) AS n FROM (SELECT 1 FROM installations WHERE tenant_id = $1 AND status = 'active' LIMIT $2) x"
        case .liveTargets:
            sql = "SELECT count(*) AS n FROM (SELECT 1 FROM targets WHERE tenant_id = $1 AND status NOT IN ('ended', 'creation_failed') LIMIT $2) x"
        }
        let n = try c.query(sql, [tenantId, limit])[0].int("n")
        if n >= limit { throw TenantLimits.exceeded(resource, limit: limit, actual: n) }
    }
}
