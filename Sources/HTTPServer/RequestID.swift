/// Request ids (docs/http-conventions.md "Every response carries X-Request-Id").
public enum RequestID {
    /// True when `candidate` matches `^[A-Za-z0-9._:-]{1,128}$` and may be echoed back.
    public static func isAcceptable(_ candidate: String) -> Bool {
        let bytes = candidate.utf8
        guard !bytes.isEmpty, bytes.count <= 128 else { return false }
        return bytes.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: ":") || c == UInt8(ascii: "-")
        }
    }

    /// RFC 4648 base32 in lower case.
    private static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

    /// A fresh id: `req_` + 26 random lowercase RFC 4648 base32 characters (130 bits), from
    /// three 64-bit draws of the system generator (each draw is a `getrandom` call on Linux;
    /// one draw per character cost 26 system calls per request).
    public static func generate() -> String {
        var rng = SystemRandomNumberGenerator()
        var out = Array("req_".utf8)
        out.reserveCapacity(30)
        var bits: UInt64 = 0, left = 0
        for _ in 0..<26 {
            if left < 5 { bits = rng.next(); left = 64 }
            out.append(alphabet[Int(bits & 31)])
            bits >>= 5
            left -= 5
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The client's id when acceptable, otherwise a generated one.
    public static func resolve(_ clientValue: String?) -> String {
        if let clientValue, isAcceptable(clientValue) { return clientValue }
        return generate()
    }
}
