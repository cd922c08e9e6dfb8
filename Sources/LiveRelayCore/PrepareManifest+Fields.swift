import JSON

/// Field readers for the prepare body: each throws `400 INVALID_REQUEST` naming the dotted field.
enum PrepareFields {
    static func rejectUnknown(_ o: [String: JSONValue], allowed: Set<String>, prefix: String) throws {
        for key in SchemaJSON.sortedKeys(o) where !allowed.contains(key) {
            let field = prefix.isEmpty ? key : "\(prefix).\(key)"
            throw DomainError.invalid(field, "unknown field \"\(field)\"")
        }
    }

    /// A present, non-null member (nil when absent or `null`).
    static func optional(_ o: [String: JSONValue], _ key: String) -> JSONValue? {
        guard let v = o[key], v != .null else { return nil }
        return v
    }

    static func required(_ o: [String: JSONValue], _ key: String, field: String) throws -> JSONValue {
        guard let v = optional(o, key) else { throw DomainError.invalid(field, "\(field) is required") }
        return v
    }

    /// A string of 1…`max` Unicode code points.
    static func name(_ o: [String: JSONValue], _ key: String, max: Int) throws -> String {
        guard case .string(let s) = try required(o, key, field: key) else { throw DomainError.invalid(key, "\(key) must be a string") }
        if s.isEmpty { throw DomainError.invalid(key, "\(key) must not be empty") }
        let n = s.unicodeScalars.count
        if n > max { throw DomainError.limit(key, "\(key) has \(n) characters; the limit is \(max)", limit: max, actual: n) }
        return s
    }

    /// `binding_id`: 1…255 UTF-8 bytes.
    static func bindingId(_ o: [String: JSONValue]) throws -> String {
        let key = "binding_id"
        guard case .string(let s) = try required(o, key, field: key) else { throw DomainError.invalid(key, "\(key) must be a string") }
        if s.isEmpty { throw DomainError.invalid(key, "\(key) must not be empty") }
        let n = s.utf8.count
        let max = PrepareLimits.maxBindingIdBytes
        if n > max { throw DomainError.limit(key, "\(key) is \(n) bytes; the limit is \(max)", limit: max, actual: n) }
        return s
    }

    /// Optional `idempotency_key` (docs/http-conventions.md): 1…255 characters, no control characters.
    static func idempotencyKey(_ o: [String: JSONValue]) throws -> String? {
        let key = "idempotency_key"
        guard let v = optional(o, key) else { return nil }
        guard case .string(let s) = v else { throw DomainError.invalid(key, "\(key) must be a string") }
        let n = s.unicodeScalars.count
        let max = PrepareLimits.maxIdempotencyKeyLength
        if n == 0 { throw DomainError.invalid(key, "\(key) must not be empty") }
        if n > max { throw DomainError.limit(key, "\(key) has \(n) characters; the limit is \(max)", limit: max, actual: n) }
        if s.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            throw DomainError.invalid(key, "\(key) must contain only printable characters")
        }
        return s
    }

    /// A required integer ≥ 0 (`3` or `3.0`) not above `limit` (when given).
    static func count(_ o: [String: JSONValue], _ key: String, field: String, limit: Int?) throws -> Int {
        let v = try required(o, key, field: field)
        guard let n = v.intValue else { throw DomainError.invalid(field, "\(field) must be an integer") }
        if n < 0 { throw DomainError.invalid(field, "\(field) must not be negative") }
        if let limit, n > Int64(limit) {
            let actual = n > Int64(Int.max) ? Int.max : Int(n)
            throw DomainError.limit(field, "\(field) is \(n); the limit is \(limit)", limit: limit, actual: actual)
        }
        return Int(n)
    }

    /// Validates a resource path (docs/limits.md): non-empty, ≤ 255 UTF-8 bytes, relative, no
    /// backslash, no control characters, and normalised: segments separated by single `/`,
    /// none empty, `.` or `..` (so `./a`, `a//b` and `a/` are refused; one file, one spelling).
    static func resourcePath(_ path: String, field: String) throws {
        if path.isEmpty { throw DomainError.invalid(field, "\(field) must not be empty") }
        let n = path.utf8.count
        let max = PrepareLimits.maxResourcePathBytes
        if n > max { throw DomainError.limit(field, "\(field) is \(n) bytes; the limit is \(max)", limit: max, actual: n) }
        if path.utf8.contains(UInt8(ascii: "\\")) { throw DomainError.invalid(field, "\(field) must not contain a backslash") }
        if path.utf8.first == UInt8(ascii: "/") { throw DomainError.invalid(field, "\(field) must be a relative path, not absolute") }
        if path.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw DomainError.invalid(field, "\(field) must not contain control characters")
        }
        let segments = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if segments.contains(where: { $0.elementsEqual("..".utf8) }) {
            throw DomainError.invalid(field, "\(field) must not contain a \"..\" segment")
        }
        if segments.contains(where: { $0.isEmpty || $0.elementsEqual(".".utf8) }) {
            throw DomainError.invalid(field, "\(field) must be normalised: no empty or \".\" segments")
        }
    }

    /// 64 lowercase hexadecimal digits.
    static func isSHA256Hex(_ s: String) -> Bool {
        s.utf8.count == 64 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
