/// An installation's reported operating-system version (docs/endpoints.md "Installation
/// attributes"): one to three dot-separated decimal parts such as `"18"`, `"18.2"` or
/// `"17.5.1"`, each 1–4 digits, so the whole string is at most 14 characters. Parts compare
/// numerically (`"18.10"` > `"18.9"`); a missing part counts as 0 (`"18"` == `"18.0"`).
///
/// ```swift
/// let v = try OSVersion.parse("18.2", field: "os_version")
/// v >= OSVersion(major: 18)   // true
/// ```
public struct OSVersion: Sendable, Equatable, Hashable, Comparable, CustomStringConvertible {
    /// Longest accepted string: three 4-digit parts and two dots.
    public static let maxLength = 14
    /// Most dot-separated parts accepted.
    public static let maxParts = 3

    /// The numeric parts, 1...3 of them, as given (trailing zeros kept, so `description`
    /// round-trips the input).
    public let parts: [Int]

    /// A version from its parts; `minor` and `patch` default to 0 and are omitted from
    /// `description` when not given.
    public init(major: Int, minor: Int? = nil, patch: Int? = nil) {
        var p = [major]
        if let minor { p.append(minor) }
        if let patch { p.append(patch) }
        parts = p
    }

    private init(parts: [Int]) { self.parts = parts }

    /// The major version (`18` of `"18.2"`).
    public var major: Int { parts[0] }

    /// The canonical text: the parts joined by dots, as received (no leading zeros, since
    /// `parse` strips them: `"018.02"` → `"18.2"`).
    public var description: String { parts.map(String.init).joined(separator: ".") }

    /// Parses `text`; nil unless it is 1–3 dot-separated parts of 1–4 ASCII digits each.
    public static func parse(_ text: String) -> OSVersion? {
        guard !text.isEmpty, text.utf8.count <= maxLength else { return nil }
        let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count <= maxParts else { return nil }
        var parts: [Int] = []
        for piece in pieces {
            guard (1...4).contains(piece.utf8.count), piece.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(piece) else { return nil }
            parts.append(n)
        }
        return OSVersion(parts: parts)
    }

    /// Parses request field `field`; throws `400 INVALID_REQUEST` naming it when `text` is not
    /// a version `parse` accepts.
    public static func parse(_ text: String, field: String) throws -> OSVersion {
        guard let v = parse(text) else {
            throw DomainError.invalid(
                field, "\(field) must be a version of 1–3 dot-separated numbers such as \"18.2\" (at most \(maxLength) characters)")
        }
        return v
    }

    /// Numeric order, missing parts counting as 0.
    public static func < (a: OSVersion, b: OSVersion) -> Bool {
        for i in 0..<maxParts {
            let x = i < a.parts.count ? a.parts[i] : 0, y = i < b.parts.count ? b.parts[i] : 0
            if x != y { return x < y }
        }
        return false
    }

    /// Equal when numerically equal (`"18"` == `"18.0"`).
    public static func == (a: OSVersion, b: OSVersion) -> Bool { !(a < b) && !(b < a) }

    /// Hashes the numeric value (trailing zero parts ignored), consistent with `==`.
    public func hash(into h: inout Hasher) {
        var p = parts
        while p.count > 1, p.last == 0 { p.removeLast() }
        h.combine(p)
    }
}
