import Foundation
import Postgres

/// A tenant row (docs/glossary.md "tenant", §4 operator endpoints).
public struct TenantRecord: Sendable, Equatable {
    public let id: String
    public let name: String
    /// Pushes per UTC day (docs/write-semantics.md "Quota").
    public let dailyPushQuota: Int64
    /// `active` or `suspended`.
    public let status: String
    public let createdAt: Date
    public let updatedAt: Date
    /// The tenant's own priority-10 budget per target per 60 minutes (docs/priority-budget.md);
    /// nil: the deployment default.
    public let priority10HourlyBudget: Int?
    /// The same for installations reporting `frequent_updates`; nil: the deployment default.
    public let frequentUpdatesHourlyBudget: Int?

    init(row r: PostgresRow) throws {
        id = try r.string("tenant_id")
        name = try r.string("name")
        dailyPushQuota = try r.int64("daily_push_quota")
        status = try r.string("status")
        createdAt = try r.date("created_at")
        updatedAt = try r.date("updated_at")
        priority10HourlyBudget = try r.optionalInt("priority10_hourly_budget")
        frequentUpdatesHourlyBudget = try r.optionalInt("frequent_updates_hourly_budget")
    }
}

/// SQL for tenants. Operator paths run in the system scope; everything else in the tenant's.
public enum TenantStore {
    static let columns = """
        tenant_id, name, daily_push_quota, status, created_at, updated_at, priority10_hourly_budget, frequent_updates_hourly_budget
        """

    /// Inserts a new active tenant.
    public static func insert(_ c: PostgresConnection, id: String, name: String, dailyPushQuota: Int64) throws -> TenantRecord {
        try TenantRecord(
            row: c.query(
                """
                INSERT INTO tenants (tenant_id, name, daily_push_quota) VALUES ($1, $2, $3) RETURNING \(columns)
                """, [id, name, dailyPushQuota])[0])
    }

    /// The tenant `id`, or nil.
    public static func get(_ c: PostgresConnection, id: String) throws -> TenantRecord? {
        try c.query("SELECT \(columns) FROM tenants WHERE tenant_id = $1", [id]).first.map(TenantRecord.init(row:))
    }

    /// Tenants in id (creation) order after `after`, at most `limit`.
    public static func list(_ c: PostgresConnection, limit: Int, after: String?) throws -> Page<TenantRecord> {
        let rows = try c.query(
            """
            SELECT \(columns) FROM tenants WHERE ($1::text IS NULL OR tenant_id > $1) ORDER BY tenant_id LIMIT $2
            """, [after, limit + 1]
        ).map(TenantRecord.init(row:))
        return Page.from(rows, limit: limit, id: \.id)
    }

    /// Changes the given fields of tenant `id` (nil keeps a value); nil when there is no such
    /// tenant. The budgets are 0–1000 (`PriorityBudget.maxBudget`; the columns' CHECKs too).
    public static func update(
        _ c: PostgresConnection, id: String, name: String?, dailyPushQuota: Int64?, status: String?,
        priority10HourlyBudget: Int64? = nil, frequentUpdatesHourlyBudget: Int64? = nil
    ) throws -> TenantRecord? {
        try c.query(
            """
            UPDATE tenants SET name = COALESCE($2, name), daily_push_quota = COALESCE($3, daily_push_quota),
                   status = COALESCE($4, status), priority10_hourly_budget = COALESCE($5, priority10_hourly_budget),
                   frequent_updates_hourly_budget = COALESCE($6, frequent_updates_hourly_budget), updated_at = now()
             WHERE tenant_id = $1 RETURNING \(columns)
            """, [id, name, dailyPushQuota, status, priority10HourlyBudget, frequentUpdatesHourlyBudget]
        ).first.map(TenantRecord.init(row:))
    }
}
