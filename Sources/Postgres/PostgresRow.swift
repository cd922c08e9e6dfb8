import CLibPQ
import Foundation

/// One result row in text format: column names and raw values as the server printed them
/// (connections run with `TimeZone=UTC`, `DateStyle=ISO`, `bytea_output=hex`).
///
/// Typed accessors look a column up by name (the first match when a name repeats) and throw
/// `PostgresError(kind: .decoding)` when the column is missing, NULL where a value is required,
/// or not in the expected format. The `optional…` variants return nil for NULL but still throw
/// for a missing column or bad format.
public struct PostgresRow: Sendable {
    /// Column names in result order.
    public var columns: [String] { layout.names }
    /// Raw text values, parallel to `columns`; nil is SQL NULL.
    public let values: [String?]
    /// The result's column names and their positions, shared by every row of one result.
    let layout: PostgresColumnLayout

    /// A row from names and values (same count). Public so callers can build rows in tests.
    public init(columns: [String], values: [String?]) {
        self.init(layout: PostgresColumnLayout(columns), values: values)
    }

    /// A row of a result whose rows share `layout`.
    init(layout: PostgresColumnLayout, values: [String?]) {
        precondition(layout.names.count == values.count, "PostgresRow: columns and values differ in count")
        self.layout = layout
        self.values = values
    }

    /// The raw text of `column`; nil when it is NULL or not in the row.
    public subscript(_ column: String) -> String? {
        guard let index = layout.index(of: column) else { return nil }
        return values[index]
    }

    /// The text of `c`. Throws `.decoding` when NULL or missing.
    public func string(_ c: String) throws -> String {
        try required(c, try optionalString(c))
    }

    /// The text of `c`, nil for NULL. Throws `.decoding` when the column is missing.
    public func optionalString(_ c: String) throws -> String? {
        guard let index = layout.index(of: c) else {
            throw PostgresError(kind: .decoding, message: "column \"\(c)\" is not in the result (have: \(columns.joined(separator: ", ")))")
        }
        return values[index]
    }

    /// An integer column (`int2`, `int4`, `int8`, or digits in text). Throws `.decoding` on
    /// NULL, missing, or non-integer text.
    public func int(_ c: String) throws -> Int { try required(c, try optionalInt(c)) }

    /// Like `int(_:)`, nil for NULL.
    public func optionalInt(_ c: String) throws -> Int? { try decode(c, as: "integer") { Int($0) } }

    /// A 64-bit integer column. Throws `.decoding` on NULL, missing, or non-integer text.
    public func int64(_ c: String) throws -> Int64 { try required(c, try optionalInt64(c)) }

    /// Like `int64(_:)`, nil for NULL.
    public func optionalInt64(_ c: String) throws -> Int64? { try decode(c, as: "int64") { Int64($0) } }

    /// A `boolean` column (`t`/`f`, also `true`/`false`). Throws `.decoding` on NULL, missing, or other text.
    public func bool(_ c: String) throws -> Bool { try required(c, try optionalBool(c)) }

    /// Like `bool(_:)`, nil for NULL.
    public func optionalBool(_ c: String) throws -> Bool? {
        try decode(c, as: "boolean") { text in
            switch text {
            case "t", "true": return true
            case "f", "false": return false
            default: return nil
            }
        }
    }

    /// A `float8`/`float4`/`numeric` column, including `Infinity`, `-Infinity`, `NaN`.
    /// Throws `.decoding` on NULL, missing, or non-numeric text.
    public func double(_ c: String) throws -> Double { try required(c, try optionalDouble(c)) }

    /// Like `double(_:)`, nil for NULL.
    public func optionalDouble(_ c: String) throws -> Double? { try decode(c, as: "double") { Double($0) } }

    /// A `timestamptz` column as printed with `TimeZone=UTC`, e.g. `2024-05-01 12:00:00.123456+00`,
    /// microseconds kept. Throws `.decoding` on NULL, missing, `infinity`, BC dates or other text.
    public func date(_ c: String) throws -> Date { try required(c, try optionalDate(c)) }

    /// Like `date(_:)`, nil for NULL.
    public func optionalDate(_ c: String) throws -> Date? {
        try decode(c, as: "timestamptz") { PostgresTimestamp.parse($0) }
    }

    /// A `bytea` column in hex output (`\x…`). Throws `.decoding` on NULL, missing, or other text.
    public func bytes(_ c: String) throws -> [UInt8] { try required(c, try optionalBytes(c)) }

    /// Like `bytes(_:)`, nil for NULL.
    public func optionalBytes(_ c: String) throws -> [UInt8]? {
        try decode(c, as: "bytea") { PostgresBytea.parse($0) }
    }

    /// A `uuid` column. Throws `.decoding` on NULL, missing, or malformed text.
    public func uuid(_ c: String) throws -> UUID { try required(c, try optionalUUID(c)) }

    /// Like `uuid(_:)`, nil for NULL.
    public func optionalUUID(_ c: String) throws -> UUID? { try decode(c, as: "uuid") { UUID(uuidString: $0) } }

    /// A one-dimensional `text[]` (or other comma-delimited array) column, with quoted and
    /// backslash-escaped elements decoded. Throws `.decoding` when the column is NULL or missing,
    /// an element is NULL, or the text is not a one-dimensional array.
    public func stringArray(_ c: String) throws -> [String] {
        let elements = try required(c, try decode(c, as: "text[]") { PostgresArrayParser.parse($0) })
        return try elements.map { element in
            guard let element else {
                throw PostgresError(kind: .decoding, message: "column \"\(c)\" holds a NULL array element")
            }
            return element
        }
    }

    private func required<T>(_ c: String, _ value: T?) throws -> T {
        guard let value else {
            throw PostgresError(kind: .decoding, message: "column \"\(c)\" is NULL")
        }
        return value
    }

    private func decode<T>(_ c: String, as type: String, _ parse: (String) -> T?) throws -> T? {
        guard let text = try optionalString(c) else { return nil }
        guard let value = parse(text) else {
            throw PostgresError(kind: .decoding, message: "column \"\(c)\" is not a valid \(type): \(text.prefix(64))")
        }
        return value
    }
}

/// The column names of one result and a name → position table built once for all its rows:
/// a row is decoded by name field after field (the dispatcher's claim reads ~40 columns of
/// hundreds of rows), and a linear search of the names per field cost more than the decoding.
/// The first position wins when a name repeats, as `Array.firstIndex(of:)` did.
final class PostgresColumnLayout: Sendable {
    let names: [String]
    private let positions: [String: Int]

    init(_ names: [String]) {
        self.names = names
        var positions: [String: Int] = [:]
        positions.reserveCapacity(names.count)
        for (i, n) in names.enumerated() where positions[n] == nil { positions[n] = i }
        self.positions = positions
    }

    func index(of name: String) -> Int? { positions[name] }

    /// True when result `res` has exactly these column names, in this order (`fieldCount` is
    /// `PQnfields(res)`): compared as C strings, with no `String` built or hashed.
    func matches(_ res: OpaquePointer, fieldCount: Int32) -> Bool {
        guard names.count == Int(fieldCount) else { return false }
        for (i, name) in names.enumerated() {
            guard let field = PQfname(res, Int32(i)), name.withCString({ strcmp($0, field) }) == 0 else { return false }
        }
        return true
    }
}

/// A statement text prepared on one session (`PQprepare`/`PQsendPrepare`): its server-side
/// name, and the column layout of its last result, which the next result of the same statement
/// reuses when its column names match (`PostgresConnection.rows(of:statement:)`). Used only by
/// the thread that holds the connection.
final class PreparedStatement {
    /// The server-side name (`lr_<n>`).
    let name: String
    /// The column layout of the statement's last result (empty for a command's); nil before
    /// the first.
    var layout: PostgresColumnLayout?

    /// A statement prepared as `name`.
    init(name: String) { self.name = name }
}
