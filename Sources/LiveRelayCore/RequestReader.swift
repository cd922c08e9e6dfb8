import Foundation
import JSON

/// Reads the fields of one JSON request object the way docs/write-semantics.md rule 2 wants: each accessor
/// checks a field's type and range and throws `400 INVALID_REQUEST` naming the field (as a
/// dotted path from the body root); `finish()` rejects any field nobody asked for.
///
/// ```swift
/// var r = try RequestReader(body)
/// let label = try r.optionalString("label", maxLength: 200)
/// try r.finish()
/// ```
public struct RequestReader {
    /// The object being read.
    public let object: [String: JSONValue]
    /// Dotted path of this object inside the body ("" for the root).
    public let path: String
    private var seen: Set<String> = []

    /// Starts reading `value`, which must be an object (else `400 INVALID_REQUEST`).
    public init(_ value: JSONValue, path: String = "") throws {
        guard case .object(let o) = value else {
            throw DomainError.invalid(path.isEmpty ? "body" : path, "\(path.isEmpty ? "the request body" : path) must be a JSON object")
        }
        self.object = o
        self.path = path
    }

    /// Full dotted name of member `key`.
    public func field(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// The raw value of `key` (marks it read); nil when absent. JSON `null` counts as absent.
    public mutating func raw(_ key: String) -> JSONValue? {
        seen.insert(key)
        guard let v = object[key], v != .null else { return nil }
        return v
    }

    /// A required field's raw value.
    public mutating func requiredRaw(_ key: String) throws -> JSONValue {
        guard let v = raw(key) else { throw DomainError.invalid(field(key), "\(field(key)) is required") }
        return v
    }

    /// An optional string of `minLength...maxLength` Unicode scalars (code points).
    public mutating func optionalString(_ key: String, minLength: Int = 0, maxLength: Int = 255) throws -> String? {
        guard let v = raw(key) else { return nil }
        guard case .string(let s) = v else { throw DomainError.invalid(field(key), "\(field(key)) must be a string") }
        let n = s.unicodeScalars.count
        if n < minLength || n > maxLength {
            throw DomainError.invalid(
                field(key), "\(field(key)) must be \(minLength)–\(maxLength) characters long",
                extra: ["limit": .int(Int64(n < minLength ? minLength : maxLength)), "actual": .int(Int64(n))])
        }
        return s
    }

    /// A required string; see `optionalString`.
    public mutating func string(_ key: String, minLength: Int = 1, maxLength: Int = 255) throws -> String {
        guard let s = try optionalString(key, minLength: minLength, maxLength: maxLength) else {
            throw DomainError.invalid(field(key), "\(field(key)) is required")
        }
        return s
    }

    /// An optional string from a fixed set of values.
    public mutating func optionalEnum(_ key: String, _ allowed: [String]) throws -> String? {
        guard let s = try optionalString(key, maxLength: 64) else { return nil }
        guard allowed.contains(s) else {
            throw DomainError.invalid(field(key), "\(field(key)) must be one of \(allowed.joined(separator: ", "))")
        }
        return s
    }

    /// A required string from a fixed set of values.
    public mutating func enumValue(_ key: String, _ allowed: [String]) throws -> String {
        guard let s = try optionalEnum(key, allowed) else { throw DomainError.invalid(field(key), "\(field(key)) is required") }
        return s
    }

    /// An optional integer within `range` (a JSON number with no fraction).
    public mutating func optionalInt(_ key: String, _ range: ClosedRange<Int64>) throws -> Int64? {
        guard let v = raw(key) else { return nil }
        guard let i = v.intValue else { throw DomainError.invalid(field(key), "\(field(key)) must be an integer") }
        guard range.contains(i) else {
            throw DomainError.invalid(field(key), "\(field(key)) must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return i
    }

    /// An optional number within `range`.
    public mutating func optionalDouble(_ key: String, _ range: ClosedRange<Double>) throws -> Double? {
        guard let v = raw(key) else { return nil }
        guard let d = v.doubleValue else { throw DomainError.invalid(field(key), "\(field(key)) must be a number") }
        guard range.contains(d) else {
            throw DomainError.invalid(
                field(key),
                "\(field(key)) must be between \(JSONValue.formatDouble(range.lowerBound)) and \(JSONValue.formatDouble(range.upperBound))")
        }
        return d
    }

    /// An optional RFC 3339 timestamp (docs/http-conventions.md), normalised to UTC. Instants before
    /// 1970-01-01T00:00:00Z or from 10000-01-01T00:00:00Z on (after normalising the offset) are
    /// refused with `400 INVALID_REQUEST` naming the field: PostgreSQL and APNs (whole epoch
    /// seconds below 10^10) cannot take them (docs/security.md "Input bounds").
    public mutating func optionalTimestamp(_ key: String) throws -> Date? {
        guard let v = raw(key) else { return nil }
        guard case .string(let s) = v, let d = Timestamp.parse(s) else {
            throw DomainError.invalid(field(key), "\(field(key)) must be an RFC 3339 timestamp such as 2026-10-18T13:00:00.000Z")
        }
        guard Timestamp.isInSupportedRange(d) else {
            throw DomainError.invalid(field(key), "\(field(key)) must lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z")
        }
        return d
    }

    /// An optional boolean.
    public mutating func optionalBool(_ key: String) throws -> Bool? {
        guard let v = raw(key) else { return nil }
        guard case .bool(let b) = v else { throw DomainError.invalid(field(key), "\(field(key)) must be true or false") }
        return b
    }

    /// An optional array of strings, each `1...maxLength` characters, at most `maxCount`
    /// elements, no duplicates.
    public mutating func optionalStringArray(_ key: String, maxCount: Int = 1000, maxLength: Int = 255) throws -> [String]? {
        guard let v = raw(key) else { return nil }
        guard case .array(let a) = v else { throw DomainError.invalid(field(key), "\(field(key)) must be an array of strings") }
        if a.count > maxCount {
            throw DomainError.limit(field(key), "\(field(key)) may hold at most \(maxCount) entries", limit: maxCount, actual: a.count)
        }
        var out: [String] = []
        var set: Set<String> = []
        for (i, e) in a.enumerated() {
            guard case .string(let s) = e, !s.isEmpty, s.unicodeScalars.count <= maxLength else {
                throw DomainError.invalid("\(field(key)).\(i)", "\(field(key)).\(i) must be a non-empty string of at most \(maxLength) characters")
            }
            guard set.insert(s).inserted else { throw DomainError.invalid("\(field(key)).\(i)", "\(field(key)).\(i) repeats \(s)") }
            out.append(s)
        }
        return out
    }

    /// A nested object reader for `key`; nil when absent.
    public mutating func optionalObject(_ key: String) throws -> RequestReader? {
        guard let v = raw(key) else { return nil }
        return try RequestReader(v, path: field(key))
    }

    /// The idempotency key of docs/http-conventions.md: required, 1–255 printable ASCII characters.
    public mutating func idempotencyKey() throws -> String {
        guard let v = raw("idempotency_key") else {
            throw DomainError.invalid(field("idempotency_key"), "idempotency_key is required on every mutating request")
        }
        guard case .string(let s) = v, (1...255).contains(s.utf8.count), s.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw DomainError.invalid(field("idempotency_key"), "idempotency_key must be 1–255 printable ASCII characters")
        }
        return s
    }

    /// Throws `400 INVALID_REQUEST` for the first (alphabetically) field that was never read.
    public func finish() throws {
        if let extra = object.keys.filter({ !seen.contains($0) }).sorted().first {
            throw DomainError.invalid(field(extra), "unknown field \(field(extra))")
        }
    }
}
