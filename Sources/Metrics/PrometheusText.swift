/// Helpers for the Prometheus text exposition format 0.0.4: name validation, escaping and
/// sample-line formatting.
enum PrometheusText {
    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`
    static func isValidMetricName(_ name: String) -> Bool {
        guard let first = name.utf8.first, isAlpha(first) || first == UInt8(ascii: "_") || first == UInt8(ascii: ":") else { return false }
        return name.utf8.allSatisfy { isAlpha($0) || isDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ":") }
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with the reserved `__`.
    static func isValidLabelName(_ name: String) -> Bool {
        guard let first = name.utf8.first, isAlpha(first) || first == UInt8(ascii: "_"), !name.hasPrefix("__") else { return false }
        return name.utf8.allSatisfy { isAlpha($0) || isDigit($0) || $0 == UInt8(ascii: "_") }
    }

    static func header(into out: inout String, name: String, help: String, type: String) {
        out += "# HELP \(name) \(escape(help, quotes: false))\n# TYPE \(name) \(type)\n"
    }

    static func sample(into out: inout String, name: String, labels: [(String, String)], value: Double) {
        out += name
        if !labels.isEmpty {
            out += "{"
            out += labels.map { "\($0.0)=\"\(escape($0.1, quotes: true))\"" }.joined(separator: ",")
            out += "}"
        }
        out += " " + format(value) + "\n"
    }

    /// Backslash and line feed are escaped everywhere; double quotes in label values only.
    static func escape(_ s: String, quotes: Bool) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for ch in s.unicodeScalars {
            switch ch {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\"" where quotes: out += "\\\""
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    /// Go-style float text: integral values without a fraction ("3"), `+Inf`, `-Inf`, `NaN`.
    static func format(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return "\(v)"
    }

    private static func isAlpha(_ c: UInt8) -> Bool { (c | 0x20) >= UInt8(ascii: "a") && (c | 0x20) <= UInt8(ascii: "z") }
    private static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
}
