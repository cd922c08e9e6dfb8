import Foundation

/// A JSON document as a value: the shape every request body, state snapshot and provider
/// payload takes inside LiveRelay.
///
/// Numbers keep the distinction the text makes visible: a number written without a fraction
/// or exponent that fits in `Int64` is `.int`, anything else `.double`.
/// Objects are unordered (`[String: JSONValue]`); `serialized()` writes keys sorted, so the
/// output is canonical (used for idempotency fingerprints and template-version hashing).
public enum JSONValue: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

/// Why a document could not be parsed (RFC 8259 syntax error, duplicate key or over the
/// nesting limit). `offset` is the byte offset where parsing stopped.
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// Human-readable reason, safe to return to a client (never contains the document).
    public let message: String
    /// Byte offset into the input where the problem was found.
    public let offset: Int
    public var description: String { "\(message) at byte \(offset)" }
    public init(_ message: String, offset: Int) { self.message = message; self.offset = offset }
}

extension JSONValue {
    /// Parses UTF-8 JSON text strictly as RFC 8259: no trailing commas, no comments, no
    /// duplicate object keys, valid UTF-8 and escapes, one value with only whitespace around it.
    ///
    /// - Parameter maxDepth: nesting limit enforced while parsing (each array or object is one
    ///   level), so hostile input cannot exhaust the stack.
    /// - Throws: `JSONParseError`.
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws -> JSONValue {
        let buf = Array(bytes)
        var p = JSONParser(bytes: buf, maxDepth: maxDepth)
        p.skipWS()
        let v = try p.value(depth: 0)
        p.skipWS()
        if p.i != buf.count { throw JSONParseError("unexpected data after the JSON value", offset: p.i) }
        return v
    }

    /// Parses a Swift string as JSON text; see `parse(_:maxDepth:)`.
    public static func parse(_ text: String, maxDepth: Int = 64) throws -> JSONValue {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }

    /// Nesting depth: scalars 0, `[]`/`{}` 1, `{"a":{"b":1}}` 2.
    public var depth: Int {
        switch self {
        case .array(let a): return 1 + (a.map(\.depth).max() ?? 0)
        case .object(let o): return 1 + (o.values.map(\.depth).max() ?? 0)
        default: return 0
        }
    }
}

struct JSONParser {
    let bytes: [UInt8]
    let maxDepth: Int
    var i = 0

    init(bytes: [UInt8], maxDepth: Int) { self.bytes = bytes; self.maxDepth = maxDepth }

    mutating func skipWS() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    func fail(_ m: String) -> JSONParseError { JSONParseError(m, offset: i) }

    mutating func value(depth: Int) throws -> JSONValue {
        guard i < bytes.count else { throw fail("unexpected end of JSON") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("unexpected character")
        }
    }

    mutating func literal(_ word: String) throws {
        let w = Array(word.utf8)
        guard i + w.count <= bytes.count, Array(bytes[i..<i + w.count]) == w else { throw fail("invalid literal") }
        i += w.count
    }

    mutating func object(depth: Int) throws -> JSONValue {
        if depth > maxDepth { throw fail("JSON nested deeper than \(maxDepth) levels") }
        i += 1
        var out: [String: JSONValue] = [:]
        skipWS()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(out) }
        while true {
            skipWS()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let keyAt = i
            let key = try string()
            skipWS()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1
            skipWS()
            let v = try value(depth: depth)
            if out.updateValue(v, forKey: key) != nil { throw JSONParseError("duplicate key", offset: keyAt) }
            skipWS()
            guard i < bytes.count else { throw fail("unexpected end of JSON") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(out) }
            throw fail("expected ',' or '}'")
        }
    }

    mutating func array(depth: Int) throws -> JSONValue {
        if depth > maxDepth { throw fail("JSON nested deeper than \(maxDepth) levels") }
        i += 1
        var out: [JSONValue] = []
        skipWS()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(out) }
        while true {
            skipWS()
            out.append(try value(depth: depth))
            skipWS()
            guard i < bytes.count else { throw fail("unexpected end of JSON") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(out) }
            throw fail("expected ',' or ']'")
        }
    }

    mutating func hex4() throws -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    mutating func string() throws -> String {
        i += 1  // opening quote
        var out: [UInt8] = []
        while true {
            guard i < bytes.count else { throw fail("unterminated string") }
            let c = bytes[i]
            if c == UInt8(ascii: "\"") { i += 1; break }
            if c < 0x20 { throw fail("control character in string") }
            if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
            i += 1
            guard i < bytes.count else { throw fail("unterminated escape") }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        throw fail("lone surrogate in \\u escape")
                    }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw fail("lone surrogate in \\u escape")
                }
                out.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
            default: throw fail("invalid escape")
            }
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in string") }
        return s
    }

    mutating func number() throws -> JSONValue {
        let start = i
        var isInt = true
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count, isDigit(bytes[i]) else { throw fail("invalid number") }
        if bytes[i] == UInt8(ascii: "0") { i += 1 } else { while i < bytes.count, isDigit(bytes[i]) { i += 1 } }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            isInt = false
            i += 1
            guard i < bytes.count, isDigit(bytes[i]) else { throw fail("invalid number") }
            while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            isInt = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, isDigit(bytes[i]) else { throw fail("invalid number") }
            while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        if isInt, let v = Int64(text) { return .int(v) }
        guard let d = Double(text), d.isFinite else { throw JSONParseError("number out of range", offset: start) }
        return .double(d)
    }

    func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
}
