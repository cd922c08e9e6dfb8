import COpenSSL
import CShims

/// An ECDSA private key on NIST P-256 (prime256v1), e.g. an APNs token-signing key: the
/// `.p8` file Apple issues is PKCS#8 PEM ("BEGIN PRIVATE KEY") — Apple: "Establishing a
/// token-based connection to APNs".
///
/// `@unchecked Sendable`: as `EVPPrivateKey` (an `EVP_PKEY` never modified after `init`).
public final class P256PrivateKey: EVPPrivateKey<P256PublicKey>, @unchecked Sendable {
    /// Parses a P-256 private key from PEM: PKCS#8 "BEGIN PRIVATE KEY" (Apple `.p8`) or SEC 1
    /// "BEGIN EC PRIVATE KEY". Text around the PEM block is ignored.
    /// - Throws: `CryptoError` for unreadable, empty, oversized (> 64 KiB) or encrypted PEM,
    ///   and `CryptoError("not a P-256 (prime256v1) key")` for any other key type or curve
    ///   (RSA, P-384, Ed25519, …).
    public convenience init(pem: String) throws {
        try self.init(pem: pem) { try $0.requireP256() }
    }

    /// A fresh random P-256 key pair (for tests, the local sandbox and certificates).
    /// Traps only if OpenSSL cannot allocate memory or gather randomness.
    public static func generate() -> P256PrivateKey {
        P256PrivateKey(key: generateKey { cshim_evp_ec_gen("P-256") })
    }

    /// ES256 signature of `message` (ECDSA P-256 with SHA-256, RFC 7518 §3.4): 64 bytes,
    /// big-endian `r ‖ s`, each left-padded to 32 bytes — the JWS encoding, not DER.
    /// ECDSA is randomised, so two signatures of one message differ.
    /// - Throws: `CryptoError` on an OpenSSL failure.
    public func signES256(_ message: [UInt8]) throws -> [UInt8] {
        let der = try key.signSHA256(message)
        return try ECDSASignature.raw(fromDER: der)
    }
}

/// Conversions between DER `ECDSA-Sig-Value` (what OpenSSL produces and consumes) and the
/// raw 64-byte `r ‖ s` of JWS (RFC 7518 §3.4).
enum ECDSASignature {
    static let componentLength = 32

    /// DER → raw `r ‖ s` (64 bytes), via `d2i_ECDSA_SIG` and `BN_bn2binpad`.
    static func raw(fromDER der: [UInt8]) throws -> [UInt8] {
        ERR_clear_error()
        let sig: OpaquePointer = try der.withNonNilBytes { p, n in
            var cursor: UnsafePointer<UInt8>? = p
            guard let sig = d2i_ECDSA_SIG(nil, &cursor, n) else { throw OpenSSLSupport.error("cannot decode ECDSA signature") }
            return sig
        }
        defer { ECDSA_SIG_free(sig) }
        var r: OpaquePointer? = nil
        var s: OpaquePointer? = nil
        ECDSA_SIG_get0(sig, &r, &s)
        var out = [UInt8](repeating: 0, count: 2 * componentLength)
        let ok = out.withUnsafeMutableBufferPointer { b in
            BN_bn2binpad(r, b.baseAddress, Int32(componentLength)) == Int32(componentLength)
                && BN_bn2binpad(s, b.baseAddress! + componentLength, Int32(componentLength)) == Int32(componentLength)
        }
        guard ok else { throw OpenSSLSupport.error("ECDSA signature component too large") }
        return out
    }

    /// Raw `r ‖ s` (exactly 64 bytes) → DER; `nil` for any other length or an OpenSSL failure.
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * componentLength else { return nil }
        defer { ERR_clear_error() }
        guard let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let (r, s) = raw.withUnsafeBufferPointer { b in
            (
                BN_bin2bn(b.baseAddress, Int32(componentLength), nil),
                BN_bin2bn(b.baseAddress! + componentLength, Int32(componentLength), nil)
            )
        }
        guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else {
            BN_free(r); BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(sig, nil)
        guard length > 0 else { return nil }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { b -> Int32 in
            var cursor = b.baseAddress
            return i2d_ECDSA_SIG(sig, &cursor)
        }
        return written == length ? out : nil
    }
}
