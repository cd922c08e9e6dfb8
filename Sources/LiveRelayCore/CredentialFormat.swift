/// The credential kinds of docs/credentials.md and their token prefixes.
public enum CredentialKind: String, Sendable, CaseIterable {
    case `operator` = "lro"
    case master = "lrm"
    case sender = "lrs"
    case publishable = "lrp"
    case installation = "lri"

    /// The id kind of the row that a credential of this kind indexes.
    public var idKind: IdKind {
        switch self {
        case .operator: return .operatorKey
        case .master: return .masterKey
        case .sender: return .senderKey
        case .publishable: return .publishableKey
        case .installation: return .installationCredential
        }
    }
}

/// A credential token split into its parts (docs/credentials.md):
/// `<prefix>_<id body>_<secret><checksum>` where the id body is the 26-char body of the row id
/// (`mk_<body>` for `lrm`), the secret is 43 base62 characters (32 random bytes, 256 bits) and
/// the checksum is CRC-32 (IEEE) of everything before it, as 6 base62 characters.
/// The checksum lets secret scanners and the server reject malformed tokens without a
/// database read.
public struct CredentialToken: Sendable, Equatable {
    /// Which kind of credential.
    public let kind: CredentialKind
    /// The public row id, with its type prefix (e.g. `mk_06f…`).
    public let id: String
    /// The secret part (43 base62 characters); compare only through a hash.
    public let secret: String

    /// Length of the base62 secret part.
    public static let secretLength = 43
    /// Length of the base62 checksum.
    public static let checksumLength = 6

    /// Builds the token string for `kind`, row `id` (with its prefix) and 32 `secretBytes`.
    public static func make(kind: CredentialKind, id: String, secretBytes: [UInt8]) -> (token: String, parsed: CredentialToken) {
        precondition(secretBytes.count == 32)
        let body = String(id.drop(while: { $0 != "_" }).dropFirst())
        let secret = Base62.encode(secretBytes, width: secretLength)
        let head = kind.rawValue + "_" + body + "_" + secret
        let token = head + Base62.encode(UInt64(CRC32.checksum(Array(head.utf8))), width: checksumLength)
        return (token, CredentialToken(kind: kind, id: id, secret: secret))
    }

    /// Parses and checks a presented token: known prefix, well-formed id body, secret length,
    /// alphabet, and checksum. Returns nil for anything malformed (→ `401 UNAUTHENTICATED`
    /// without touching the database).
    public static func parse(_ token: String) -> CredentialToken? {
        let utf8 = Array(token.utf8)
        guard utf8.count == 3 + 1 + Identifier.bodyLength + 1 + secretLength + checksumLength else { return nil }
        guard let kind = CredentialKind(rawValue: String(decoding: utf8[0..<3], as: UTF8.self)), utf8[3] == 0x5F else { return nil }
        let bodyStart = 4, bodyEnd = 4 + Identifier.bodyLength
        guard utf8[bodyEnd] == 0x5F else { return nil }
        let body = String(decoding: utf8[bodyStart..<bodyEnd], as: UTF8.self)
        guard Identifier.isValidBody(Substring(body)) else { return nil }
        let secretStart = bodyEnd + 1, secretEnd = secretStart + secretLength
        guard utf8[secretStart..<utf8.count].allSatisfy({ Base62.value(of: $0) != nil }) else { return nil }
        let head = Array(utf8[0..<secretEnd])
        let expected = Base62.encode(UInt64(CRC32.checksum(head)), width: checksumLength)
        guard String(decoding: utf8[secretEnd...], as: UTF8.self) == expected else { return nil }
        return CredentialToken(
            kind: kind, id: kind.idKind.rawValue + "_" + body,
            secret: String(decoding: utf8[secretStart..<secretEnd], as: UTF8.self))
    }
}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib computes it. A checksum for
/// typo and scanner detection, not a security measure.
public enum CRC32 {
    static let table: [UInt32] = (0..<256).map { i -> UInt32 in
        var c = UInt32(i)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    /// CRC-32 of `bytes` ("123456789" → 0xCBF43926).
    public static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}

/// Base62 (`0-9A-Za-z`) big-endian number encoding with fixed width.
public enum Base62 {
    static let alphabet: [UInt8] = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)

    /// Encodes `value` left-padded with "0" to `width` characters (more if it needs more).
    public static func encode(_ value: UInt64, width: Int) -> String {
        var v = value
        var out: [UInt8] = []
        repeat { out.append(alphabet[Int(v % 62)]); v /= 62 } while v > 0
        while out.count < width { out.append(0x30) }
        return String(decoding: out.reversed(), as: UTF8.self)
    }

    /// Encodes `bytes` as one big-endian number, left-padded to `width` characters.
    /// 32 bytes need at most 43 characters.
    public static func encode(_ bytes: [UInt8], width: Int) -> String {
        var num = bytes.drop(while: { $0 == 0 }).map { UInt32($0) }
        var out: [UInt8] = []
        while !num.isEmpty {
            var rem: UInt32 = 0
            var next: [UInt32] = []
            next.reserveCapacity(num.count)
            for d in num {
                let acc = rem * 256 + d
                let q = acc / 62
                rem = acc % 62
                if !(next.isEmpty && q == 0) { next.append(q) }
            }
            out.append(alphabet[Int(rem)])
            num = next
        }
        while out.count < width { out.append(0x30) }
        return String(decoding: out.reversed(), as: UTF8.self)
    }

    /// Value 0–61 of one alphabet character, nil if it is not one.
    public static func value(of c: UInt8) -> Int? {
        switch c {
        case 0x30...0x39: return Int(c - 0x30)
        case 0x41...0x5A: return Int(c - 0x41) + 10
        case 0x61...0x7A: return Int(c - 0x61) + 36
        default: return nil
        }
    }
}
