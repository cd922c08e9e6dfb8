/// Splitting and percent-decoding of the request target (origin-form `path?query`) that
/// libmicrohttpd hands over raw. This is not an HTTP parser: libmicrohttpd has already
/// parsed the request line; this only decodes the URL's components.
enum URLDecoding {
    /// Splits a raw request target into its path and raw query (fragment dropped). An
    /// absolute-form target (`http://host/p`) keeps only its path.
    static func split(target: String) -> (path: String, rawQuery: String) {
        var t = Substring(target)
        if let hash = t.firstIndex(of: "#") { t = t[..<hash] }
        if !t.hasPrefix("/"), let scheme = t.range(of: "://") {
            let rest = t[scheme.upperBound...]
            t = rest.firstIndex(of: "/").map { rest[$0...] } ?? "/"
        }
        guard let q = t.firstIndex(of: "?") else { return (String(t), "") }
        return (String(t[..<q]), String(t[t.index(after: q)...]))
    }

    /// Query arguments (`a=1&b=x%20y&c`): names and values percent-decoded, `+` as space;
    /// the first value of a repeated name wins; undecodable parts are kept as sent.
    static func parseQuery(_ raw: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in raw.split(separator: "&", omittingEmptySubsequences: true) {
            let (name, value): (Substring, Substring)
            if let eq = pair.firstIndex(of: "=") {
                name = pair[..<eq]
                value = pair[pair.index(after: eq)...]
            } else {
                name = pair
                value = ""
            }
            let key = decode(name, plusAsSpace: true) ?? String(name)
            if out[key] == nil { out[key] = decode(value, plusAsSpace: true) ?? String(value) }
        }
        return out
    }

    /// Percent-decodes `s`; nil when a `%` is not followed by two hex digits or the result is
    /// not valid UTF-8.
    static func decode(_ s: Substring, plusAsSpace: Bool = false) -> String? {
        let utf8 = Array(s.utf8)
        guard utf8.contains(UInt8(ascii: "%")) || (plusAsSpace && utf8.contains(UInt8(ascii: "+"))) else { return String(s) }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        var i = 0
        while i < utf8.count {
            let c = utf8[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < utf8.count, let hi = hex(utf8[i + 1]), let lo = hex(utf8[i + 2]) else { return nil }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(plusAsSpace && c == UInt8(ascii: "+") ? 0x20 : c)
                i += 1
            }
        }
        if out.contains(0) { return nil }  // U+0000 cannot be stored or compared in PostgreSQL text
        return String(validating: out, as: UTF8.self)
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x41...0x46: return c - 0x41 + 10
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
}
