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
/// stale when more than `pruneAbove` are kept.
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
    private let entries = Locked<[String: Entry]>([:])

    /// An empty set of readings.
    public init() {}

    /// A reading of `tenantId`'s `day` taken less than `maxAgeSeconds` before `now` (uptime
    /// nanoseconds) that leaves the day far from its limit; nil otherwise (read the counters).
    public func far(tenantId: String, day: String, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> Reading? {
        guard let e = entries.withLock({ $0[Self.key(tenantId, day)] }),
            now >= e.takenAt, now - e.takenAt < UInt64(Self.maxAgeSeconds * 1e9),
            QuotaStore.farFromLimit(limit: e.reading.limit, reserved: e.reading.reserved, used: e.reading.used)
        else { return nil }
        return e.reading
    }

    /// Records `reading` of `tenantId`'s `day`, taken at `now` (uptime nanoseconds).
    public func record(tenantId: String, day: String, _ reading: Reading, now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        entries.withLock { entries in
            entries[Self.key(tenantId, day)] = Entry(reading: reading, takenAt: now)
            if entries.count > Self.pruneAbove {
                let horizon = UInt64(Self.maxAgeSeconds * 1e9)
                entries = entries.filter { now >= $0.value.takenAt && now - $0.value.takenAt < horizon }
            }
        }
    }

    /// Forgets every reading of `tenantId` (its limit changed).
    public func forget(tenantId: String) {
        let prefix = tenantId + "|"
        entries.withLock { entries in entries = entries.filter { !$0.key.hasPrefix(prefix) } }
    }

    /// Readings kept now (tests).
    public var count: Int { entries.withLock { $0.count } }

    private static func key(_ tenantId: String, _ day: String) -> String { tenantId + "|" + day }
}
