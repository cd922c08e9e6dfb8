import Foundation

extension Identifier {
    /// The smallest id of `kind` that `make(kind, now:)` can produce at `date` or later (the
    /// millisecond prefix of `date`, then all-zero bits): a keyset lower bound for "created at
    /// or after `date`" scans over time-ordered ids.
    public static func lowerBound(_ kind: IdKind, at date: Date) -> String {
        let ms = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: ms >> (8 * (5 - i))) }
        return kind.rawValue + "_" + CrockfordBase32.encode128(bytes)
    }
}
