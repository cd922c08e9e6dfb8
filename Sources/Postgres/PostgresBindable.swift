import Foundation

/// A value that can be sent as a text-format query parameter (`$1`, `$2`, … in `PQexecParams`).
///
/// The server infers each parameter's type from the statement, so `postgresText` must be in the
/// text input format of that type. Add a cast in SQL (`$1::timestamptz`) where inference is
/// ambiguous.
public protocol PostgresBindable {
    /// The parameter in PostgreSQL's text input format; nil sends SQL NULL.
    var postgresText: String? { get }
}

extension String: PostgresBindable {
    /// The string itself. PostgreSQL text cannot hold NUL (U+0000): such a parameter makes the
    /// query throw `PostgresError(.query)`.
    public var postgresText: String? { self }
}

extension Int: PostgresBindable {
    /// Decimal digits, e.g. `"-42"`.
    public var postgresText: String? { String(self) }
}

extension Int32: PostgresBindable {
    /// Decimal digits, e.g. `"-42"`.
    public var postgresText: String? { String(self) }
}

extension Int64: PostgresBindable {
    /// Decimal digits, e.g. `"-42"`.
    public var postgresText: String? { String(self) }
}

extension Bool: PostgresBindable {
    /// `"t"` or `"f"`.
    public var postgresText: String? { self ? "t" : "f" }
}

extension Double: PostgresBindable {
    /// Shortest round-tripping decimal (`"0.1"`, `"1e-05"`), or `"Infinity"`, `"-Infinity"`, `"NaN"`.
    public var postgresText: String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return description
    }
}

extension Date: PostgresBindable {
    /// UTC ISO 8601 with microseconds and `Z`, e.g. `"2024-05-01T12:00:00.123456Z"`, rounded to the
    /// nearest microsecond (PostgreSQL's `timestamptz` precision).
    public var postgresText: String? { PostgresTimestamp.format(self) }

    /// The value a `timestamptz` written from this date reads back as (`PostgresRow.date`):
    /// rounded to the nearest microsecond. For a record built before the row is written
    /// (docs/write-path.md "The response before round trip 2").
    public var postgresStored: Date { PostgresTimestamp.parse(PostgresTimestamp.format(self)) ?? self }
}

extension UUID: PostgresBindable {
    /// Lower-case canonical form, e.g. `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`.
    public var postgresText: String? { uuidString.lowercased() }
}

extension Array: PostgresBindable where Element == UInt8 {
    /// `bytea` hex input format: `"\x"` followed by two lower-case hex digits per byte.
    public var postgresText: String? { PostgresBytea.format(self) }
}

extension Optional: PostgresBindable where Wrapped: PostgresBindable {
    /// The wrapped value's text, or nil (SQL NULL) for `.none`.
    public var postgresText: String? {
        switch self {
        case .none: return nil
        case .some(let value): return value.postgresText
        }
    }
}

/// A `text[]` parameter, for `WHERE id = ANY($1)` or `unnest($1::text[])`.
///
/// Every element is double-quoted with `"` and `\` backslash-escaped, so commas, braces, quotes,
/// backslashes, spaces, empty strings and the word NULL all arrive as the exact strings given.
/// Elements are never SQL NULL.
public struct PostgresTextArray: PostgresBindable, Sendable, Equatable {
    /// The elements, in order.
    public let values: [String]

    /// Wraps `values` as one `text[]` parameter.
    public init(_ values: [String]) { self.values = values }

    /// The array literal, e.g. `{"a","b,c","say \"hi\""}`: every element double-quoted, `"` and
    /// `\` escaped with a backslash (PostgreSQL "Arrays", array value input). Built over UTF-8
    /// bytes in one buffer (the dispatcher binds arrays of hundreds of ids per statement);
    /// `"` and `\` are ASCII, so escaping byte-wise never splits a multi-byte character.
    public var postgresText: String? {
        var total = 2
        for v in values { total += v.utf8.count + 3 }
        var out: [UInt8] = []
        out.reserveCapacity(total)
        out.append(UInt8(ascii: "{"))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            for b in value.utf8 {
                if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(b)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}
