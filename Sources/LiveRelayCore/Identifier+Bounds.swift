import Foundation

extension Identifier {
    /// The smallest id of `kind` that `make(kind, now:)` can produce at `date` or later (the
    /// millisecond prefix of `date`, then all-zero bits): a keyset lower bound for "created at
    /// or after `date`" scans over time-ordered ids.
    public static func lowerBound(_ kind: IdKind, at date: Date) -> String {
        kind.rawValue + "_" + CrockfordBase32.encode128(timeBytes(milliseconds(date)))
    }
}
