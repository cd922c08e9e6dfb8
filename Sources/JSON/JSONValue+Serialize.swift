import Foundation

/// Writing JSON text. Output is compact (no spaces), object keys sorted by their UTF-8 bytes,
/// strings escaped minimally (quote, backslash and control characters; everything else,
/// including "/" and non-ASCII, written as UTF-8), so byte counts are exactly what a provider
/// receives (docs/limits.md payload limits) and equal documents serialize identically.
extension JSONValue {
    /// Compact canonical JSON text as UTF-8 bytes.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        write(into: &out)
        return out
    }

    /// Compact canonical JSON text as a `String`.
    public var jsonString: String { String(decoding: serialized(), as: UTF8.self) }

    /// Appends the compact canonical text of this value to `out`.
    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
        case .bool(let b):
            if b { out.append(contentsOf: [0x74, 0x72, 0x75, 0x65]) } else { out.append(contentsOf: [0x66, 0x61, 0x6C, 0x73, 0x65]) }
        case .int(let v): JSONValue.writeInt(v, into: &out)
        case .double(let d): out.append(contentsOf: Array(JSONValue.formatDouble(d).utf8))
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (n, v) in a.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                v.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (n, member) in o.sorted(by: { JSONValue.utf8Precedes($0.key, $1.key) }).enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Appends the decimal text of `v` (what `String(v)` gives), without the intermediate
    /// `String` and array that allocating it cost for every integer of every document.
    static func writeInt(_ v: Int64, into out: inout [UInt8]) {
        if v < 0 { out.append(UInt8(ascii: "-")) }
        var m = v.magnitude  // UInt64: Int64.min has no Int64 magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in  // UInt64.max has 20
            var count = 0
            repeat {
                digits[count] = UInt8(ascii: "0") + UInt8(m % 10)
                m /= 10
                count += 1
            } while m > 0
            for i in stride(from: count - 1, through: 0, by: -1) { out.append(digits[i]) }
        }
    }

    /// JSON number text for a finite double: integral values within ±2^53 without a
    /// fraction ("3" rather than "3.0"), others in Swift's shortest round-trip form.
    /// Non-finite values (never produced by the parser) are written as `null`.
    public static func formatDouble(_ d: Double) -> String {
        guard d.isFinite else { return "null" }
        if d == d.rounded(), abs(d) < 9_007_199_254_740_992 { return String(Int64(d)) }
        return "\(d)"
    }

    /// True when `a`'s UTF-8 bytes sort before `b`'s (the order of object keys): `memcmp` over
    /// the contiguous bytes, then the shorter first, as `a.utf8.lexicographicallyPrecedes(b.utf8)`.
    static func utf8Precedes(_ a: String, _ b: String) -> Bool {
        let fast = a.utf8.withContiguousStorageIfAvailable { x in
            b.utf8.withContiguousStorageIfAvailable { y -> Bool in
                let n = min(x.count, y.count)
                if n > 0, let px = x.baseAddress, let py = y.baseAddress {
                    let c = memcmp(px, py, n)
                    if c != 0 { return c < 0 }
                }
                return x.count < y.count
            }
        }
        if let fast, let result = fast { return result }
        return a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// Appends `s` as a JSON string literal: runs of bytes that need no escape are copied at
    /// once; `"`, `\` and control characters are escaped.
    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(0x22)
        var s = s
        s.withUTF8 { bytes in
            var start = 0
            for i in 0..<bytes.count {
                let c = bytes[i]
                guard c == 0x22 || c == 0x5C || c < 0x20 else { continue }
                if start < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i])) }
                start = i + 1
                switch c {
                case 0x22: out.append(contentsOf: [0x5C, 0x22])
                case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
                case 0x0A: out.append(contentsOf: [0x5C, 0x6E])
                case 0x0D: out.append(contentsOf: [0x5C, 0x72])
                case 0x09: out.append(contentsOf: [0x5C, 0x74])
                case 0x08: out.append(contentsOf: [0x5C, 0x62])
                case 0x0C: out.append(contentsOf: [0x5C, 0x66])
                default:
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hex[Int(c >> 4)], hex[Int(c & 0xF)]])
                }
            }
            if start < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<bytes.count])) }
        }
        out.append(0x22)
    }
}

/// Convenience accessors used by request decoders.
extension JSONValue {
    /// The dictionary of an `.object`, else nil.
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    /// The elements of an `.array`, else nil.
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    /// The text of a `.string`, else nil.
    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    /// The value of a `.bool`, else nil.
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    /// An integer: `.int`, or a `.double` with no fraction within Int64 range; else nil.
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d == d.rounded() && abs(d) < 9.2e18: return Int64(d)
        default: return nil
        }
    }
    /// Any number as a Double, else nil.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
    /// True for `.null`.
    public var isNull: Bool { self == .null }
    /// Member `key` of an object (nil when absent or not an object).
    public subscript(key: String) -> JSONValue? { objectValue?[key] }
}
