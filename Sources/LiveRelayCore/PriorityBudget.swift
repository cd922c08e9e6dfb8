import Foundation

/// The server-side priority-10 budget of iOS Live Activities (docs/priority-budget.md; Apple,
/// "Starting and updating Live Activities with ActivityKit push notifications": priority-10
/// updates count against a budget the system does not publish, priority 5 does not).
///
/// Per target, LiveRelay counts the priority-10 pushes it sent in a sliding window of
/// `windowMilliseconds` (60 minutes). A send at epoch millisecond `s` counts at `now` while
/// `s > now − 3 600 000`, so exactly 60 minutes later it no longer counts. The budget is the
/// tenant's `priority10_hourly_budget`, or its `frequent_updates_hourly_budget` for an
/// installation reporting `frequent_updates: true`; both 0–`maxBudget`.
///
/// `decide` is the whole rule, a pure function of values:
///
/// | platform | kind | alert | requested | sends in window | sent at | downgraded | counts |
/// | --- | --- | --- | --- | --- | --- | --- | --- |
/// | android | any | any | any | – | requested | no | no |
/// | ios | any | any | 5 (or any other than 10) | – | requested | no | no |
/// | ios | start | any | 10 | any | 10 | no | yes |
/// | ios | end (with or without state) | any | 10 | any | 10 | no | yes |
/// | ios | update | yes | 10 | any | 10 | no | yes |
/// | ios | update | no | 10 | < budget | 10 | no | yes |
/// | ios | update | no | 10 | ≥ budget | 5 | yes | no |
///
/// "counts": the send, once APNs accepted it (or its outcome is unknown after it was sent), is
/// added to the target's window. Starts, ends and alert updates over the budget still count,
/// so they use up room that state-only updates would otherwise get.
public enum PriorityBudget {
    /// Length of the sliding window, milliseconds (60 minutes).
    public static let windowMilliseconds: Int64 = 3_600_000
    /// Largest budget a tenant may set (`priority10_hourly_budget`, `frequent_updates_hourly_budget`).
    /// The per-target window keeps at most this many sends, so a count of `maxBudget` means
    /// "`maxBudget` or more" and every decision stays exact.
    public static let maxBudget = 1000
    /// The priority a downgraded update goes at.
    public static let downgradedPriority = 5
    /// The priority that counts against the budget.
    public static let countedPriority = 10

    /// The deployment's default budgets, used for tenants that set none
    /// (`LIVERELAY_PRIORITY10_HOURLY_BUDGET`, `LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET`).
    public struct Defaults: Sendable, Equatable {
        /// Priority-10 sends per target per 60 minutes (default 40).
        public var priority10HourlyBudget: Int
        /// The same for installations with `frequent_updates: true` (default 240).
        public var frequentUpdatesHourlyBudget: Int
        /// Budgets per target per 60 minutes, each 0–`maxBudget` (callers validate).
        public init(priority10HourlyBudget: Int = 40, frequentUpdatesHourlyBudget: Int = 240) {
            self.priority10HourlyBudget = priority10HourlyBudget
            self.frequentUpdatesHourlyBudget = frequentUpdatesHourlyBudget
        }
        /// 40 and 240.
        public static let standard = Defaults()
    }

    /// What `decide` chose for one push.
    public struct Decision: Sendable, Equatable {
        /// `apns-priority` of the push.
        public var priority: Int
        /// The priority the write asked for (its `priority`, default 10).
        public var requestedPriority: Int
        /// True when `priority` < `requestedPriority` because the budget was spent.
        public var downgraded: Bool
        /// True when the send enters the target's window (sent at priority 10 on iOS).
        public var counts: Bool
    }

    /// The table in the type documentation.
    /// - Parameters:
    ///   - sendsInWindow: priority-10 sends of the target in the last 60 minutes (`sendsInWindow(_:nowMs:)`).
    ///   - budget: the budget that applies to the target (ignored for Android).
    ///   - kind: start, update or end.
    ///   - hasAlert: the write carries an explicit `alert`.
    ///   - platform: `ios` or `android`.
    ///   - requestedPriority: the write's `priority`.
    public static func decide(
        sendsInWindow: Int, budget: Int, kind: PushEvent, hasAlert: Bool, platform: String,
        requestedPriority: Int
    ) -> Decision {
        let asRequested = Decision(priority: requestedPriority, requestedPriority: requestedPriority, downgraded: false, counts: false)
        guard platform == "ios", requestedPriority == countedPriority else { return asRequested }
        if kind == .update && !hasAlert && sendsInWindow >= budget {
            return Decision(priority: downgradedPriority, requestedPriority: requestedPriority, downgraded: true, counts: false)
        }
        return Decision(priority: countedPriority, requestedPriority: requestedPriority, downgraded: false, counts: true)
    }

    /// How many of `sendsMs` (epoch milliseconds) lie in the window ending at `nowMs`.
    public static func sendsInWindow(_ sendsMs: [Int64], nowMs: Int64) -> Int {
        let floor = nowMs - windowMilliseconds
        return sendsMs.reduce(0) { $0 + ($1 > floor ? 1 : 0) }
    }

    /// The window after one more send at `atMs`: entries no longer in the window at `atMs`
    /// dropped, the newest `maxBudget` kept, oldest first (what the store's bulk update writes).
    public static func recordSend(_ sendsMs: [Int64], atMs: Int64) -> [Int64] {
        let floor = atMs - windowMilliseconds
        let kept = (sendsMs + [atMs]).filter { $0 > floor }.sorted()
        return Array(kept.suffix(maxBudget))
    }

    /// The budget of a target (the rule the store's SQL applies, `PriorityBudgetSQL.budget`,
    /// stated in Swift): the installation's frequent-updates budget when it reports
    /// `frequent_updates`, else the priority-10 budget; a tenant's own value wins over the
    /// deployment default.
    public static func budget(frequentUpdates: Bool, tenantPriority10: Int?, tenantFrequentUpdates: Int?, defaults: Defaults) -> Int {
        frequentUpdates ? (tenantFrequentUpdates ?? defaults.frequentUpdatesHourlyBudget) : (tenantPriority10 ?? defaults.priority10HourlyBudget)
    }

    /// Epoch milliseconds of `date` (floor).
    public static func epochMilliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }
}
