import Foundation
import LiveRelayCore
import Postgres

extension OperationStore {
    /// Operation counts per (UTC day of `created_at`, status) of the tenant since `since`, and
    /// the used quota units per day (for `DailyOutcomes`). Ids are time-ordered (`Identifier`),
    /// so the scan is bounded on the primary key by the id of `since` minus a day of slack
    /// (the id's clock is the API node's, `created_at` the database's).
    public static func dailyCounts(
        _ c: PostgresConnection, tenantId: String, since: Date
    ) throws
        -> (counts: [(day: String, status: String, count: Int64)], quota: [(day: String, used: Int64)])
    {
        let lowestId = Identifier.lowerBound(.operation, at: since.addingTimeInterval(-86_400))
        let counts = try c.query(
            """
            SELECT (created_at AT TIME ZONE 'UTC')::date::text AS day, status, count(*)::bigint AS n
              FROM operations
             WHERE tenant_id = $1 AND id >= $2 AND created_at >= $3
             GROUP BY 1, 2
            """, [tenantId, lowestId, since]
        ).map { r in (day: try r.string("day"), status: try r.string("status"), count: try r.int64("n")) }
        let quota = try c.query(
            """
            SELECT day::text AS day, COALESCE(sum(used), 0)::bigint AS used
              FROM push_quota WHERE tenant_id = $1 AND day >= ($2::timestamptz AT TIME ZONE 'UTC')::date
             GROUP BY day
            """, [tenantId, since]
        ).map { r in (day: try r.string("day"), used: try r.int64("used")) }
        return (counts, quota)
    }
}
