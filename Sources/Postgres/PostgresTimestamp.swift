import Foundation

/// Conversions between `Date` and PostgreSQL `timestamptz` text, at microsecond precision.
///
/// Formatting always writes UTC (`2024-05-01T12:00:00.123456Z`). Parsing accepts what the server
/// prints with `DateStyle=ISO` (`2024-05-01 12:00:00.123456+00`, any `±HH[:MM[:SS]]` offset, an
/// optional fraction of up to 6 digits, optionally `T` and `Z`). `infinity` and BC dates are
/// rejected. Calendar arithmetic is the proleptic Gregorian civil-days algorithm, so no
/// `Calendar` or `DateFormatter` (neither thread-cheap) is involved.
enum PostgresTimestamp {
    /// `date` rounded to the nearest microsecond, as `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    static func format(_ date: Date) -> String {
        let micros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        let (secs, us) = floorDivMod(micros, 1_000_000)
        let (days, secOfDay) = floorDivMod(secs, 86_400)
        let (y, m, d) = civil(fromDays: days)
        return pad(y, 4) + "-" + pad(m, 2) + "-" + pad(d, 2) + "T"
            + pad(secOfDay / 3600, 2) + ":" + pad(secOfDay / 60 % 60, 2) + ":" + pad(secOfDay % 60, 2)
            + "." + pad(us, 6) + "Z"
    }

    /// Parses server output; nil when `text` is not a finite ISO timestamp.
    static func parse(_ text: String) -> Date? {
        var s = Scanner(Array(text.utf8))
        guard let year = s.number(minDigits: 4, maxDigits: 7), s.take("-"),
            let month = s.number(minDigits: 2, maxDigits: 2), s.take("-"),
            let day = s.number(minDigits: 2, maxDigits: 2),
            (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var secOfDay: Int64 = 0
        var micros: Int64 = 0
        var offset: Int64 = 0
        if s.take(" ") || s.take("T") {
            guard let hh = s.number(minDigits: 2, maxDigits: 2), s.take(":"),
                let mi = s.number(minDigits: 2, maxDigits: 2), s.take(":"),
                let ss = s.number(minDigits: 2, maxDigits: 2),
                hh <= 24, mi < 60, ss < 61
            else { return nil }
            secOfDay = hh * 3600 + mi * 60 + ss
            if s.take(".") {
                let start = s.index
                guard let frac = s.number(minDigits: 1, maxDigits: 6) else { return nil }
                var scale: Int64 = 1
                for _ in 0..<(6 - (s.index - start)) { scale *= 10 }
                micros = frac * scale
            }
            if s.take("Z") {
                offset = 0
            } else if let sign = s.peek, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
                s.index += 1
                guard let oh = s.number(minDigits: 2, maxDigits: 2) else { return nil }
                var o = oh * 3600
                if s.take(":") {
                    guard let om = s.number(minDigits: 2, maxDigits: 2) else { return nil }
                    o += om * 60
                    if s.take(":") {
                        guard let os = s.number(minDigits: 2, maxDigits: 2) else { return nil }
                        o += os
                    }
                }
                offset = sign == UInt8(ascii: "-") ? -o : o
            }
        }
        guard s.atEnd else { return nil }
        let secs = days(fromYear: year, month: month, day: day) * 86_400 + secOfDay - offset
        return Date(timeIntervalSince1970: Double(secs) + Double(micros) / 1_000_000)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
    static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDivMod(y, 400).0
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The proleptic Gregorian (year, month, day) of a day count since 1970-01-01.
    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = floorDivMod(z, 146_097).0
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }

    private static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b
        var r = a % b
        if r < 0 { q -= 1; r += b }
        return (q, r)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// A minimal cursor over ASCII bytes.
    private struct Scanner {
        let bytes: [UInt8]
        var index = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        var atEnd: Bool { index == bytes.count }
        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }
        mutating func take(_ ch: Unicode.Scalar) -> Bool {
            guard peek == UInt8(ascii: ch) else { return false }
            index += 1
            return true
        }
        mutating func number(minDigits: Int, maxDigits: Int) -> Int64? {
            var value: Int64 = 0
            var count = 0
            while count < maxDigits, let b = peek, b >= 48, b <= 57 {
                value = value * 10 + Int64(b - 48)
                index += 1
                count += 1
            }
            return count >= minDigits ? value : nil
        }
    }
}
