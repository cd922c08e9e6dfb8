import Foundation

/// RFC 3339 timestamps as docs/http-conventions.md wants them: input with any offset is accepted and
/// normalised to UTC; output is always UTC with milliseconds (`2026-10-18T13:00:00.000Z`).
/// APNs time fields are whole epoch seconds (floor), see `epochSeconds(_:)`.
public enum Timestamp {
    /// Parses an RFC 3339 date-time (`T` or `t` separator, `Z` or `±hh:mm` offset, optional
    /// fraction of any length). Returns nil for anything else, including dates that do not
    /// exist (Feb 30) and out-of-range fields.
    public static func parse(_ s: String) -> Date? {
        let b = Array(s.utf8)
        func num(_ from: Int, _ len: Int) -> Int? {
            guard from + len <= b.count else { return nil }
            var v = 0
            for i in from..<(from + len) {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        guard b.count >= 20, let year = num(0, 4), b[4] == 0x2D, let month = num(5, 2), b[7] == 0x2D,
            let day = num(8, 2), b[10] == 0x54 || b[10] == 0x74, let hour = num(11, 2), b[13] == 0x3A,
            let minute = num(14, 2), b[16] == 0x3A, let second = num(17, 2)
        else { return nil }
        var i = 19
        var fraction = 0.0
        if i < b.count, b[i] == 0x2E {
            i += 1
            var scale = 0.1
            let start = i
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 { fraction += Double(b[i] - 0x30) * scale; scale /= 10; i += 1 }
            guard i > start else { return nil }
        }
        guard i < b.count else { return nil }
        var offset = 0
        if b[i] == 0x5A || b[i] == 0x7A {
            i += 1
        } else if b[i] == 0x2B || b[i] == 0x2D {
            guard let oh = num(i + 1, 2), b.count > i + 3, b[i + 3] == 0x3A, let om = num(i + 4, 2), oh < 24, om < 60 else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == 0x2D ? -1 : 1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second < 60
        else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let secs = Double(days * 86400 + hour * 3600 + minute * 60 + second - offset) + fraction
        return Date(timeIntervalSince1970: secs)
    }

    /// First instant not accepted as input: 10000-01-01T00:00:00Z, epoch seconds.
    public static let supportedEndEpochSeconds: Double = 253_402_300_800

    /// True for instants from 1970-01-01T00:00:00Z (inclusive) to 10000-01-01T00:00:00Z
    /// (exclusive): the input range of every time field (docs/security.md "Input bounds").
    public static func isInSupportedRange(_ date: Date) -> Bool {
        let t = date.timeIntervalSince1970
        return t >= 0 && t < supportedEndEpochSeconds
    }

    /// `2026-10-18T13:00:00.000Z`: UTC, milliseconds truncated toward the past.
    public static func format(_ date: Date) -> String {
        let totalMs = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var secs = totalMs / 1000
        var ms = totalMs % 1000
        if ms < 0 { ms += 1000; secs -= 1 }
        var days = secs / 86400
        var rem = secs % 86400
        if rem < 0 { rem += 86400; days -= 1 }
        let (y, m, d) = civilFromDays(Int(days))
        func p(_ v: Int, _ w: Int) -> String { let s = String(v); return String(repeating: "0", count: max(0, w - s.count)) + s }
        return "\(p(y, 4))-\(p(m, 2))-\(p(d, 2))T\(p(Int(rem / 3600), 2)):\(p(Int(rem % 3600 / 60), 2)):\(p(Int(rem % 60), 2)).\(p(Int(ms), 3))Z"
    }

    /// Whole seconds since the Unix epoch, rounded down (APNs `timestamp`, `stale-date`,
    /// `dismissal-date`, `apns-expiration`; docs/http-conventions.md/docs/providers.md).
    public static func epochSeconds(_ date: Date) -> Int64 {
        Int64(date.timeIntervalSince1970.rounded(.down))
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's civil-calendar algorithms (proleptic Gregorian).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
