import Foundation

/// Outcome counts per UTC day for `GET /v1/remote-updates/usage/daily` (docs/console.md,
/// "Outcomes per day"): pure, so the zero-filling and the day arithmetic are unit-tested
/// without a database.
///
/// A day is a UTC calendar date `YYYY-MM-DD`. An operation counts on the day it was created
/// (accepted by the API), under its current `status`; `quotaUsed` is the day's used push-quota
/// units (provider acceptances).
public struct DailyOutcomes: Sendable, Equatable {
    /// One day of the series.
    public struct Day: Sendable, Equatable {
        /// `YYYY-MM-DD` (UTC).
        public let day: String
        /// Operations created that day by current status; every `OperationStatus` is present (0 when none).
        public let counts: [OperationStatus: Int64]
        /// Used quota units of that day.
        public let quotaUsed: Int64
        /// Sum of `counts`.
        public var total: Int64 { counts.values.reduce(0, +) }
    }

    /// Oldest first, ending with today; exactly `days` entries.
    public let days: [Day]

    /// Smallest and largest `?days=` accepted.
    public static let dayRange = 1...31
    /// `?days=` when absent.
    public static let defaultDays = 7

    /// The `days` UTC dates ending with `now`'s, oldest first (`["2026-11-25", …, "2026-12-01"]`).
    public static func dates(endingAt now: Date, days: Int) -> [String] {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let today = calendar.startOfDay(for: now)
        return (0..<days).reversed().map { back in
            String(Timestamp.format(calendar.date(byAdding: .day, value: -back, to: today)!).prefix(10))
        }
    }

    /// The instant the series starts: 00:00:00 UTC of its first day.
    public static func start(endingAt now: Date, days: Int) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(byAdding: .day, value: -(days - 1), to: calendar.startOfDay(for: now))!
    }

    /// Builds the zero-filled series from database rows: `counts` (day, status, count) and
    /// `quota` (day, used). Rows for days outside the series or unknown statuses are ignored.
    public init(now: Date, days: Int, counts: [(day: String, status: String, count: Int64)], quota: [(day: String, used: Int64)]) {
        let dates = Self.dates(endingAt: now, days: days)
        var byDay: [String: [OperationStatus: Int64]] = [:]
        for d in dates { byDay[d] = Dictionary(uniqueKeysWithValues: OperationStatus.allCases.map { ($0, Int64(0)) }) }
        for row in counts {
            guard let s = OperationStatus(rawValue: row.status), byDay[row.day] != nil else { continue }
            byDay[row.day]![s, default: 0] += row.count
        }
        var used: [String: Int64] = [:]
        for row in quota { used[row.day, default: 0] += row.used }
        self.days = dates.map { Day(day: $0, counts: byDay[$0]!, quotaUsed: used[$0] ?? 0) }
    }
}
