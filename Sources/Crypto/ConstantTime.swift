import COpenSSL

/// Comparisons whose running time does not depend on where two byte strings differ
/// (`CRYPTO_memcmp`), for MACs, checksums and token hashes.
public enum ConstantTime {
    /// `true` when `a` and `b` have the same length and the same bytes.
    ///
    /// Different lengths return `false` immediately: only the length, never the content,
    /// leaks through timing.
    public static func equals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 }
        }
    }
}
