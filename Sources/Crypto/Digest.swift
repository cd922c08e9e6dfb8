import COpenSSL

/// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104) through OpenSSL's one-shot APIs.
public enum Digest {
    /// SHA-256 of `data`: 32 bytes.
    public static func sha256(_ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = data.withNonNilBytes { p, n in
            out.withUnsafeMutableBufferPointer { EVP_Digest(p, n, $0.baseAddress, &length, EVP_sha256(), nil) }
        }
        guard ok == 1, length == 32 else { OpenSSLSupport.fatal("EVP_Digest(SHA-256) failed") }
        return out
    }

    /// SHA-256 of `data` as 64 lowercase hexadecimal characters.
    public static func sha256Hex(_ data: [UInt8]) -> String { hexString(sha256(data)) }

    /// HMAC-SHA-256 of `data` under `key` (`hmacSHA256`) as 64 lowercase hexadecimal characters.
    /// One table lookup per nibble: a credential check runs it on every request, where
    /// `String(format: "%02x")` per byte cost 7 % of the API process's CPU
    /// (docs/write-path.md "What a write costs").
    public static func hmacSHA256Hex(key: [UInt8], data: [UInt8]) -> String { hexString(hmacSHA256(key: key, data: data)) }

    /// HMAC-SHA-256 of `data` under `key` (any length, including empty): 32 bytes.
    /// RFC 4231 gives the test vectors.
    public static func hmacSHA256(key: [UInt8], data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let result = key.withNonNilBytes { k, kn in
            data.withNonNilBytes { d, dn in
                out.withUnsafeMutableBufferPointer { HMAC(EVP_sha256(), k, Int32(kn), d, dn, $0.baseAddress, &length) }
            }
        }
        guard result != nil, length == 32 else { OpenSSLSupport.fatal("HMAC(SHA-256) failed") }
        return out
    }
}
