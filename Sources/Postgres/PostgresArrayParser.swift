/// Parses the text output of a one-dimensional PostgreSQL array (`{a,"b,c",NULL}`), as the
/// server prints `text[]` and other arrays whose element delimiter is a comma.
enum PostgresArrayParser {
    /// The elements, nil for an unquoted `NULL`; nil overall when `text` is not a one-dimensional
    /// array literal (multi-dimensional arrays are rejected).
    static func parse(_ text: String) -> [String?]? {
        let b = Array(text.utf8)
        var i = 0
        // Optional dimension decoration for non-default lower bounds: `[0:1]={…}`.
        if b.first == UInt8(ascii: "[") {
            guard let eq = b.firstIndex(of: UInt8(ascii: "=")) else { return nil }
            i = eq + 1
        }
        guard i < b.count, b[i] == UInt8(ascii: "{") else { return nil }
        i += 1
        var out: [String?] = []
        if i < b.count, b[i] == UInt8(ascii: "}") {
            return i + 1 == b.count ? out : nil
        }
        while i < b.count {
            if b[i] == UInt8(ascii: "\"") {
                i += 1
                var element: [UInt8] = []
                var closed = false
                while i < b.count {
                    let c = b[i]
                    if c == UInt8(ascii: "\\") {
                        guard i + 1 < b.count else { return nil }
                        element.append(b[i + 1])
                        i += 2
                    } else if c == UInt8(ascii: "\"") {
                        i += 1
                        closed = true
                        break
                    } else {
                        element.append(c)
                        i += 1
                    }
                }
                guard closed else { return nil }
                out.append(String(decoding: element, as: UTF8.self))
            } else {
                let start = i
                while i < b.count, b[i] != UInt8(ascii: ","), b[i] != UInt8(ascii: "}") {
                    if b[i] == UInt8(ascii: "{") || b[i] == UInt8(ascii: "\"") { return nil }
                    i += 1
                }
                var lo = start, hi = i
                while lo < hi, isSpace(b[lo]) { lo += 1 }
                while hi > lo, isSpace(b[hi - 1]) { hi -= 1 }
                let token = String(decoding: b[lo..<hi], as: UTF8.self)
                guard !token.isEmpty else { return nil }
                out.append(token.uppercased() == "NULL" ? nil : token)
            }
            guard i < b.count else { return nil }
            if b[i] == UInt8(ascii: ",") {
                i += 1
            } else {
                // b[i] is "}": must be the last byte.
                return i + 1 == b.count ? out : nil
            }
        }
        return nil
    }

    private static func isSpace(_ c: UInt8) -> Bool {
        c == UInt8(ascii: " ") || c == UInt8(ascii: "\t") || c == UInt8(ascii: "\n") || c == UInt8(ascii: "\r")
    }
}
