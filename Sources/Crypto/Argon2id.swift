import CArgon2

/// Password-grade hashing of credential secrets with argon2id (RFC 9106) through the
/// reference implementation, libargon2 (docs/credentials.md: "Secrets are stored only as argon2id
/// encoded hashes").
///
/// The defaults (m = 19 456 KiB, t = 2, p = 1) are OWASP's argon2id minimum; one hash costs
/// about 20 ms of one core, so a verification must not sit on the request hot path without
/// the docs/credentials.md verification cache.
public enum Argon2id {
    /// Cost parameters of a hash.
    public struct Parameters: Sendable, Equatable {
        /// Memory cost in KiB (argon2 `m`); at least `8 × parallelism`.
        public var memoryKiB: UInt32 = 19_456
        /// Number of passes over memory (argon2 `t`); at least 1.
        public var iterations: UInt32 = 2
        /// Number of lanes (argon2 `p`); at least 1. Lanes above 1 run on extra threads.
        public var parallelism: UInt32 = 1

        /// m = 19 456 KiB, t = 2, p = 1 (OWASP Password Storage Cheat Sheet, argon2id).
        public static let standard = Parameters()

        /// Creates parameters; invalid combinations are reported by `Argon2id.hash`.
        public init(memoryKiB: UInt32 = 19_456, iterations: UInt32 = 2, parallelism: UInt32 = 1) {
            self.memoryKiB = memoryKiB
            self.iterations = iterations
            self.parallelism = parallelism
        }
    }

    /// Salt length in bytes (random per hash).
    public static let saltLength = 16
    /// Tag (hash output) length in bytes.
    public static let tagLength = 32

    /// Upper bounds accepted by `verify`, so a corrupted or hostile stored hash cannot make a
    /// verification allocate gigabytes or loop for minutes: m ≤ 1 GiB, t ≤ 64, p ≤ 64.
    static let maxMemoryKiB: UInt32 = 1 << 20
    static let maxIterations: UInt32 = 64
    static let maxParallelism: UInt32 = 64

    /// Hashes `secret` with a fresh 16-byte random salt and returns the PHC string encoding,
    /// e.g. `$argon2id$v=19$m=19456,t=2,p=1$<salt b64>$<tag b64>` (unpadded standard base64,
    /// 32-byte tag, version 0x13).
    ///
    /// - Throws: `CryptoError` when libargon2 rejects the parameters (e.g. memory below
    ///   8 × parallelism) or cannot allocate memory. The message never contains the secret.
    public static func hash(_ secret: [UInt8], parameters: Parameters = .standard) throws -> String {
        let p = parameters
        guard p.iterations >= 1, p.parallelism >= 1, p.memoryKiB >= 8 * p.parallelism else {
            throw CryptoError("invalid argon2id parameters (need t ≥ 1, p ≥ 1, m ≥ 8·p)")
        }
        let salt = SecureRandom.bytes(saltLength)
        let encodedLength =
            argon2_encodedlen(
                p.iterations, p.memoryKiB, p.parallelism,
                UInt32(saltLength), UInt32(tagLength), Argon2_id) + 1
        var encoded = [CChar](repeating: 0, count: encodedLength)
        let rc = secret.withNonNilBytes { pwd, pwdLength in
            salt.withUnsafeBufferPointer { s in
                encoded.withUnsafeMutableBufferPointer { e in
                    argon2id_hash_encoded(
                        p.iterations, p.memoryKiB, p.parallelism, pwd, pwdLength,
                        s.baseAddress, s.count, tagLength, e.baseAddress, e.count)
                }
            }
        }
        guard rc == ARGON2_OK.rawValue else {
            throw CryptoError("argon2id hashing failed (\(String(cString: argon2_error_message(rc))))")
        }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `true` when `secret` hashes to `encoded` (a PHC string from `hash`) under the salt and
    /// parameters it carries. The tag comparison is constant-time (libargon2).
    ///
    /// Returns `false`, never throws, for a wrong secret and for anything malformed: not
    /// `$argon2id$v=19$m=…,t=…,p=…$salt$tag`, a NUL byte, over 512 bytes, or parameters above
    /// `m ≤ 1 GiB, t ≤ 64, p ≤ 64`.
    public static func verify(_ secret: [UInt8], encoded: String) -> Bool {
        guard isPlausible(encoded) else { return false }
        let rc = secret.withNonNilBytes { pwd, pwdLength in
            encoded.withCString { argon2id_verify($0, pwd, pwdLength) }
        }
        return rc == ARGON2_OK.rawValue
    }

    /// Shape and cost check before handing `encoded` to libargon2.
    static func isPlausible(_ encoded: String) -> Bool {
        let utf8 = Array(encoded.utf8)
        guard utf8.count <= 512, !utf8.contains(0) else { return false }
        let fields = encoded.split(separator: "$", omittingEmptySubsequences: false)
        guard fields.count == 6, fields[0].isEmpty, fields[1] == "argon2id", fields[2] == "v=19",
            !fields[4].isEmpty, !fields[5].isEmpty
        else { return false }
        let costs = fields[3].split(separator: ",", omittingEmptySubsequences: false)
        guard costs.count == 3,
            let m = cost(costs[0], "m="), let t = cost(costs[1], "t="), let p = cost(costs[2], "p="),
            m <= maxMemoryKiB, t <= maxIterations, p <= maxParallelism
        else { return false }
        return true
    }

    private static func cost(_ field: Substring, _ prefix: String) -> UInt32? {
        guard field.hasPrefix(prefix) else { return nil }
        let digits = field.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.count <= 10, digits.allSatisfy({ $0 >= "0" && $0 <= "9" }) else { return nil }
        return UInt32(digits)
    }
}
