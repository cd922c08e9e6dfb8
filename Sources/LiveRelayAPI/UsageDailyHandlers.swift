import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore

/// `GET /v1/remote-updates/usage/daily?days=1..31` (master key; docs/console.md "Outcomes per
/// day"): the tenant's operations per UTC day by current status, and the day's used quota, for
/// the console's chart.
///
/// Answer: `{"object": "usage_daily", "days": N, "data": [{"day": "YYYY-MM-DD", "total": n,
/// "quota_used": n, "outcomes": {"queued": n, "sending": n, "accepted": n, "failed": n,
/// "cancelled": n, "superseded": n, "unknown": n, "expired": n}}, …]}`, oldest day first, the
/// last entry today (UTC). `days` absent → 7; not an integer in 1…31 → `400 INVALID_REQUEST`
/// (`details.field: "days"`); a sender key → `403 PERMISSION_DENIED` (tenant-wide counts are
/// management metadata).
enum UsageDailyHandlers {
    static func daily(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var days = DailyOutcomes.defaultDays
        if let d = req.query["days"] {
            guard let v = Int(d), DailyOutcomes.dayRange.contains(v) else {
                throw DomainError.invalid(
                    "days", "days must be an integer from \(DailyOutcomes.dayRange.lowerBound) to \(DailyOutcomes.dayRange.upperBound)")
            }
            days = v
        }
        let now = ctx.now()
        let since = DailyOutcomes.start(endingAt: now, days: days)
        let rows = try ctx.db.tenant(tenant) { c in try OperationStore.dailyCounts(c, tenantId: tenant, since: since) }
        let series = DailyOutcomes(now: now, days: days, counts: rows.counts, quota: rows.quota)
        return .json(
            200,
            .object([
                "object": "usage_daily", "days": .int(Int64(days)),
                "data": .array(
                    series.days.map { d in
                        .object([
                            "day": .string(d.day), "total": .int(d.total), "quota_used": .int(d.quotaUsed),
                            "outcomes": .object(Dictionary(uniqueKeysWithValues: d.counts.map { ($0.key.rawValue, JSONValue.int($0.value)) }))
                        ])
                    })
            ]))
    }
}
