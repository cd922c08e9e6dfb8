import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG (`RAND_bytes`, seeded from the
/// operating system). Use for secrets, salts, nonces and serial numbers.
public enum SecureRandom {
    /// Returns `count` random bytes (`count` ≥ 0; 0 gives `[]`).
    ///
    /// Traps if OpenSSL cannot produce randomness (an unseedable DRBG): returning weaker bytes
    /// would be worse than stopping.
    public static func bytes(_ count: Int) -> [UInt8] {
        precondition(count >= 0 && count <= Int(Int32.max), "SecureRandom.bytes: count out of range")
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { OpenSSLSupport.fatal("RAND_bytes failed") }
        return out
    }

    /// A random (version 4) UUID in its lowercase 36-character form, e.g.
    /// `"3f2b8c1e-5d4a-4e7f-9a0b-1c2d3e4f5a6b"` (RFC 9562 §5.4: 122 random bits, version 4,
    /// variant `10`), as APNs' `apns-id` and `apns-request-id` take it. From `bytes(16)` with
    /// the text built byte by byte: Foundation's `UUID().uuidString.lowercased()` cost a file
    /// open, an `NSString` and a second string per call, once per push (`perf` of
    /// `deploy/bench/fanout`).
    public static func uuidV4() -> String {
        var b = bytes(16)
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        let hex = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (i, byte) in b.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
