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
}
