import Foundation
import Postgres

/// A record whose stored properties map one to one onto the columns of its query: each
/// property is read from the column named by its snake_case form (`RowDecoder.column(for:)`),
/// with the `PostgresRow` accessor of its type. Conforming is all a record needs: the compiler
/// synthesises `init(from:)` and this protocol's `init(row:)` runs it over the row.
///
/// A record with a parsed or derived column (JSON text, an enum, a renamed or prefixed column)
/// keeps its own `init(row:)` instead.
protocol RowDecodable: Decodable {}

extension RowDecodable {
    /// The record in `row`, decoded as `RowDecoder` describes.
    /// - Throws: `PostgresError(kind: .decoding)` for a missing column, NULL in a non-optional
    ///   property, text not in the property's format, or a property type `RowDecoder` does not read.
    init(row: PostgresRow) throws { self = try Self(from: RowDecoder(row: row)) }
}

/// Reads a `Decodable` record from one result row (text format, as `PostgresRow` holds it) by
/// column name, through `PostgresRow`'s typed accessors so every value is checked exactly as
/// the hand-written `init(row:)` of the other records check theirs:
///
/// | property type | accessor |
/// | --- | --- |
/// | `String` | `string` |
/// | `Int` / `Int64` | `int` / `int64` |
/// | `Bool` | `bool` |
/// | `Double` | `double` |
/// | `Date` (`timestamptz`) | `date` |
/// | `[UInt8]` (`bytea`) | `bytes` |
/// | `[String]` (`text[]`) | `stringArray` |
///
/// An optional property is nil for SQL NULL; a column missing from the row throws whether the
/// property is optional or not (the row is the query's, so a missing column is a bug in the
/// query, never an absent value). Any other property type, nesting, or unkeyed access throws
/// `PostgresError(kind: .decoding)`.
struct RowDecoder: Decoder {
    let row: PostgresRow

    /// Always empty: a row has no nesting.
    var codingPath: [any CodingKey] { [] }
    /// Always empty: decoding needs no options.
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The column named `property` in snake_case, the rule of Foundation's
    /// `JSONEncoder.KeyEncodingStrategy.convertToSnakeCase`: an underscore before an uppercase
    /// letter that follows a lowercase letter or digit, or that ends a run of capitals before a
    /// lowercase letter; then everything lowercased. `tenantId` → `tenant_id`, `tokenURI` →
    /// `token_uri`, `priority10Budget` → `priority10_budget`.
    static func column(for property: String) -> String {
        let characters = Array(property)
        var column = ""
        for (i, character) in characters.enumerated() {
            if character.isUppercase, i > 0 {
                let previous = characters[i - 1]
                let endsCapitals = previous.isUppercase && i + 1 < characters.count && characters[i + 1].isLowercase
                if previous.isLowercase || previous.isNumber || endsCapitals { column.append("_") }
            }
            column += character.lowercased()
        }
        return column
    }

    /// The error for what a row cannot hold (`what`: a type or a kind of container).
    static func unsupported(_ what: String, column: String? = nil) -> PostgresError {
        PostgresError(kind: .decoding, message: "\(column.map { "column \"\($0)\": " } ?? "")a row cannot be decoded as \(what)")
    }

    /// The row's columns, keyed by property (`Columns`).
    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Columns<Key>(row: row))
    }

    /// Throws: a row is not a list.
    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw Self.unsupported("a list") }

    /// Throws: a row is not one value.
    func singleValueContainer() throws -> any SingleValueDecodingContainer { throw Self.unsupported("a single value") }
}

extension RowDecoder {
    /// The keyed view of one row for `RowDecoder`: property `key` is column
    /// `RowDecoder.column(for: key.stringValue)`, read with the accessor of the table in
    /// `RowDecoder`'s documentation.
    struct Columns<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let row: PostgresRow

        /// Always empty: a row has no nesting.
        var codingPath: [any CodingKey] { [] }
        /// Always empty: synthesised initialisers ask for their keys by name, never list them.
        var allKeys: [Key] { [] }

        /// The column of `key`.
        func column(_ key: Key) -> String { RowDecoder.column(for: key.stringValue) }

        /// Always true, so a column missing from the row throws when read (through `decodeNil`) instead
        /// of turning an optional property nil.
        func contains(_ key: Key) -> Bool { true }

        /// True for SQL NULL. Throws `.decoding` when the column is missing.
        func decodeNil(forKey key: Key) throws -> Bool { try row.optionalString(column(key)) == nil }

        /// `PostgresRow.bool`.
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try row.bool(column(key)) }
        /// `PostgresRow.string`.
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try row.string(column(key)) }
        /// `PostgresRow.double`.
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try row.double(column(key)) }
        /// `PostgresRow.int`.
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try row.int(column(key)) }
        /// `PostgresRow.int64`.
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try row.int64(column(key)) }

        /// `Date`, `[UInt8]` and `[String]` through `date`, `bytes` and `stringArray`.
        /// Throws `.decoding` for any other type.
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            let c = column(key)
            let value: Any
            switch type {
            case is Date.Type: value = try row.date(c)
            case is [UInt8].Type: value = try row.bytes(c)
            case is [String].Type: value = try row.stringArray(c)
            default: throw RowDecoder.unsupported("\(type)", column: c)
            }
            guard let typed = value as? T else { throw RowDecoder.unsupported("\(type)", column: c) }
            return typed
        }

        // No record stores these widths; they throw rather than guess a range check.
        /// Throws: not a row type.
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { throw RowDecoder.unsupported("Float", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { throw RowDecoder.unsupported("Int8", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { throw RowDecoder.unsupported("Int16", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { throw RowDecoder.unsupported("Int32", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { throw RowDecoder.unsupported("UInt", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { throw RowDecoder.unsupported("UInt8", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { throw RowDecoder.unsupported("UInt16", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { throw RowDecoder.unsupported("UInt32", column: column(key)) }
        /// Throws: not a row type.
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { throw RowDecoder.unsupported("UInt64", column: column(key)) }

        /// Throws: a row has no nesting.
        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            throw RowDecoder.unsupported("a nested record", column: column(key))
        }
        /// Throws: a row has no nesting.
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            throw RowDecoder.unsupported("a nested list", column: column(key))
        }
        /// Throws: a row has no nesting.
        func superDecoder() throws -> any Decoder { throw RowDecoder.unsupported("a superclass") }
        /// Throws: a row has no nesting.
        func superDecoder(forKey key: Key) throws -> any Decoder { throw RowDecoder.unsupported("a superclass", column: column(key)) }
    }
}
