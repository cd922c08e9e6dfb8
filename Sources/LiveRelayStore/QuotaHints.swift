import Dispatch
import Locking

/// This process's last reading of each tenant-day's quota counters, so that a write far from
/// its tenant's daily limit need not read them before it writes (docs/write-path.md "The quota
/// read only near the limit").
///
/// The reading a write takes in round trip 1 only chooses its quota path: far from the limit it
/// reserves and then re-reads the counters after reserving (round trip 2), and it is that
/// re-read which keeps the limit (`QuotaStore.fastPathAllows`; when it fails the write runs
/// again on the exact path). So a reading this process took less than `maxAgeSeconds` ago may
/// stand in for the first read, as long as it leaves the day far from its limit
/// (`QuotaStore.farFromLimit`): when it is wrong, the cost is one retry, never an overshoot.
/// Every reading a write takes (first read, re-read, exact read) is recorded here.
///
/// Thread-safe; readings are keyed by tenant id and day (`YYYY-MM-DD`, UTC) and dropped once
/// stale when more than `pruneAbove` are kept. `forget` drops a tenant's readings when its limit
/// changes; a write whose read was already under way may still record one, which stands in for
/// at most `maxAgeSeconds`.
public final class QuotaHints: Sendable {
    /// One quota reading: the day's limit and its reserved and used units.
    public typealias Reading = (limit: Int64, reserved: Int64, used: Int64)

    /// The instance the API's write handlers use.
    public static let shared = QuotaHints()
    /// How long (seconds) a reading may stand in for a read.
    public static let maxAgeSeconds = 1.0
    /// Readings kept before stale ones are dropped.
    static let pruneAbove = 4096

    private struct Entry {
        let reading: Reading
        /// `DispatchTime` uptime (nanoseconds) when it was taken.
        let takenAt: UInt64
    }
    private struct State {
        var entries: [String: Entry] = [:]
        /// When stale readings were last dropped (uptime nanoseconds).
        var prunedAt: UInt64 = 0
    }
    private let state = Locked(State())
    private static let maxAgeNanoseconds = UInt64(maxAgeSeconds * 1e9)

    /// An empty set of readings.
    public init() {}

    /// A reading of `tenantId`'s `day` taken less than `maxAgeSeconds` before `now` (uptime
    /// nanoseconds) that leaves the day far from its limit; nil otherwise (read the counters).
    public func far(tenantId: String, day: String, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> Reading? {
        guard let e = state.withLock({ $0.entries[Self.key(tenantId, day)] }),
            now >= e.takenAt, now - e.takenAt < Self.maxAgeNanoseconds,
            QuotaStore.farFromLimit(limit: e.reading.limit, reserved: e.reading.reserved, used: e.reading.used)
        else { return nil }
        return e.reading
    }

    /// Records `reading` of `tenantId`'s `day`, taken at `takenAt` (uptime nanoseconds: no later
    /// than the statement that read it ran, not when it was decoded). A reading older than the one
    /// kept is ignored. Past `pruneAbove` readings, stale ones are dropped, at most once per
    /// `maxAgeSeconds`, so a process serving many tenants does not filter on every write.
    public func record(tenantId: String, day: String, _ reading: Reading, takenAt: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        let key = Self.key(tenantId, day)
        state.withLock { s in
            if let kept = s.entries[key], kept.takenAt > takenAt { return }
            s.entries[key] = Entry(reading: reading, takenAt: takenAt)
            if s.entries.count > Self.pruneAbove, takenAt >= s.prunedAt, takenAt - s.prunedAt >= Self.maxAgeNanoseconds {
                s.entries = s.entries.filter { takenAt >= $0.value.takenAt && takenAt - $0.value.takenAt < Self.maxAgeNanoseconds }
                s.prunedAt = takenAt
            }
        }
    }

    /// Forgets every reading of `tenantId` (its limit changed).
    public func forget(tenantId: String) {
        let prefix = tenantId + "|"
        state.withLock { s in s.entries = s.entries.filter { !$0.key.hasPrefix(prefix) } }
    }

    /// Readings kept now (tests).
    public var count: Int { state.withLock { $0.entries.count } }

    private static func key(_ tenantId: String, _ day: String) -> String { tenantId + "|" + day }
}
