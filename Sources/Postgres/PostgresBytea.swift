/// `bytea` hex format (`\x0aff…`), the server's default `bytea_output` and the format this
/// module sets on every connection.
enum PostgresBytea {
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// `\x` followed by two lower-case hex digits per byte.
    static func format(_ bytes: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: 2 + bytes.count * 2)
        out[0] = UInt8(ascii: "\\")
        out[1] = UInt8(ascii: "x")
        for (i, byte) in bytes.enumerated() {
            out[2 + 2 * i] = hexDigits[Int(byte >> 4)]
            out[3 + 2 * i] = hexDigits[Int(byte & 0x0f)]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of hex-format output; nil when `text` is not `\x` plus an even number of hex digits.
    static func parse(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"),
            utf8.count % 2 == 0
        else { return nil }
        var out = [UInt8]()
        out.reserveCapacity((utf8.count - 2) / 2)
        var i = 2
        while i < utf8.count {
            guard let hi = nibble(utf8[i]), let lo = nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}
