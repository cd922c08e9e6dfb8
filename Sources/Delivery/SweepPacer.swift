import Foundation

/// When a periodic scan whose cost grows with the queue may run next (docs/delivery.md
/// "Maintenance cost"): every `intervalSeconds`, unless its last run took so long that running
/// that often would spend more than `maxShare` of one core on it; then the pause after a run is
/// its duration divided by `maxShare`. The per-tenant queue gauges and the token-pending safety
/// net scan every queued operation (150 ms and 386 ms beside 100,000 queued in
/// `deploy/bench/fanout`); at a million queued, a 5 s interval would give them a third of a
/// core. Pure value: the caller passes the clock.
public struct SweepPacer: Sendable, Equatable {
    /// The configured pause between runs, in seconds.
    public let intervalSeconds: Double
    /// Most of one core's time the scan may take, as a fraction (0.02 = 2 %), above 0.
    public let maxShare: Double
    /// The earliest time of the next run (`.distantPast` before the first).
    public private(set) var nextAt: Date = .distantPast
    /// The pause chosen after the last run, in seconds (`intervalSeconds` before any run).
    public private(set) var lastPauseSeconds: Double

    /// - Parameters: `intervalSeconds` ≥ 0; `maxShare` in (0, 1] (values outside are clamped).
    public init(intervalSeconds: Double, maxShare: Double = 0.02) {
        self.intervalSeconds = max(0, intervalSeconds)
        self.maxShare = min(1, max(0.000_1, maxShare))
        lastPauseSeconds = self.intervalSeconds
    }

    /// Whether the scan may run at `now`.
    public func isDue(_ now: Date) -> Bool { now >= nextAt }

    /// Records a run that started at `startedAt` and took `seconds`; returns the pause (seconds)
    /// before the next one: `max(intervalSeconds, seconds / maxShare)`, counted from `startedAt`.
    @discardableResult
    public mutating func ran(startedAt: Date, seconds: Double) -> Double {
        lastPauseSeconds = max(intervalSeconds, max(0, seconds) / maxShare)
        nextAt = startedAt.addingTimeInterval(lastPauseSeconds)
        return lastPauseSeconds
    }
}
