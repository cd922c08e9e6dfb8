import COpenSSL
import CShims

/// Owner of one `EVP_PKEY`, freed on deinit. Internal: the public key classes wrap it.
///
/// `@unchecked Sendable`: the key is never modified after construction, and OpenSSL 3
/// documents `EVP_PKEY` as safe for concurrent read-only use (each signature or
/// verification creates its own `EVP_MD_CTX`) — openssl-threads(7).
final class EVPKey: @unchecked Sendable {
    let pointer: OpaquePointer

    /// Takes ownership of `pointer`.
    init(taking pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_free(pointer) }

    /// Parses a private key PEM (PKCS#8 "PRIVATE KEY" or the traditional "EC PRIVATE KEY" /
    /// "RSA PRIVATE KEY"). Encrypted PEM is refused (no password prompt).
    static func readPrivate(pem: String) throws -> EVPKey {
        try OpenSSLSupport.withReadBIO(pem, "private key PEM") { bio in
            guard let key = PEM_read_bio_PrivateKey(bio, nil, pemRefusePassword, nil) else {
                throw OpenSSLSupport.error("cannot read private key PEM")
            }
            return EVPKey(taking: key)
        }
    }

    /// Parses a "PUBLIC KEY" PEM (SubjectPublicKeyInfo, RFC 5280 §4.1.2.7).
    static func readPublic(pem: String) throws -> EVPKey {
        try OpenSSLSupport.withReadBIO(pem, "public key PEM") { bio in
            guard let key = PEM_read_bio_PUBKEY(bio, nil, pemRefusePassword, nil) else {
                throw OpenSSLSupport.error("cannot read public key PEM")
            }
            return EVPKey(taking: key)
        }
    }

    /// Parses SubjectPublicKeyInfo DER.
    static func readPublic(der: [UInt8]) throws -> EVPKey {
        ERR_clear_error()
        return try der.withNonNilBytes { p, n in
            var cursor: UnsafePointer<UInt8>? = p
            guard let key = d2i_PUBKEY(nil, &cursor, n) else { throw OpenSSLSupport.error("cannot read public key DER") }
            return EVPKey(taking: key)
        }
    }

    /// `true` for an EC key on prime256v1 (NIST P-256, secp256r1) with a named-curve encoding.
    var isP256: Bool {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &name, name.count, &length) == 1 else {
            ERR_clear_error()
            return false
        }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256" || group == "secp256r1"
    }

    /// `true` for an RSA key (rsaEncryption; RSA-PSS-restricted keys are not RSA here).
    var isRSA: Bool { EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA }

    /// Throws `CryptoError("not a P-256 (prime256v1) key")` unless `isP256`.
    func requireP256() throws {
        guard isP256 else { throw CryptoError("not a P-256 (prime256v1) key") }
    }

    /// Throws `CryptoError("not an RSA key")` unless `isRSA`.
    func requireRSA() throws {
        guard isRSA else { throw CryptoError("not an RSA key") }
    }

    /// Key size in bits (e.g. 256 for P-256, 2048 for RSA-2048).
    var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }

    /// SubjectPublicKeyInfo DER of the public half.
    func spkiDER() -> [UInt8] {
        let length = i2d_PUBKEY(pointer, nil)
        guard length > 0 else { OpenSSLSupport.fatal("i2d_PUBKEY failed") }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { b -> Int32 in
            var cursor = b.baseAddress
            return i2d_PUBKEY(pointer, &cursor)
        }
        guard written == length else { OpenSSLSupport.fatal("i2d_PUBKEY failed") }
        return out
    }

    /// A separate key object holding only the public half (via SPKI DER).
    func publicOnly() -> EVPKey {
        do { return try EVPKey.readPublic(der: spkiDER()) } catch { OpenSSLSupport.fatal("cannot copy public key") }
    }

    /// "BEGIN PRIVATE KEY" PKCS#8 PEM (unencrypted).
    func pkcs8PEM() -> String {
        do {
            return try OpenSSLSupport.writeToString("cannot write PKCS#8 PEM") {
                PEM_write_bio_PKCS8PrivateKey($0, pointer, nil, nil, 0, nil, nil)
            }
        } catch { OpenSSLSupport.fatal("cannot write PKCS#8 PEM") }
    }

    /// "BEGIN PUBLIC KEY" SubjectPublicKeyInfo PEM.
    func publicPEM() -> String {
        do {
            return try OpenSSLSupport.writeToString("cannot write public key PEM") { PEM_write_bio_PUBKEY($0, pointer) }
        } catch { OpenSSLSupport.fatal("cannot write public key PEM") }
    }

    /// SHA-256 signature of `message` in OpenSSL's native encoding (DER `ECDSA-Sig-Value`
    /// for EC, PKCS#1 v1.5 for RSA).
    func signSHA256(_ message: [UInt8]) throws -> [UInt8] {
        ERR_clear_error()
        guard let ctx = EVP_MD_CTX_new() else { throw OpenSSLSupport.error("cannot allocate digest context") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pointer) == 1 else {
            throw OpenSSLSupport.error("cannot initialise signing")
        }
        var length = Int(EVP_PKEY_get_size(pointer))
        guard length > 0 else { throw OpenSSLSupport.error("cannot size signature") }
        var signature = [UInt8](repeating: 0, count: length)
        let ok = message.withNonNilBytes { m, n in
            signature.withUnsafeMutableBufferPointer { EVP_DigestSign(ctx, $0.baseAddress, &length, m, n) }
        }
        guard ok == 1 else { throw OpenSSLSupport.error("signing failed") }
        signature.removeSubrange(length...)
        return signature
    }

    /// Verifies a SHA-256 signature in OpenSSL's native encoding; any failure is `false`.
    func verifySHA256(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { ERR_clear_error(); return false }
        defer { EVP_MD_CTX_free(ctx); ERR_clear_error() }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, pointer) == 1 else { return false }
        let ok = signature.withNonNilBytes { s, sn in
            message.withNonNilBytes { m, mn in EVP_DigestVerify(ctx, s, sn, m, mn) }
        }
        return ok == 1
    }
}

/// Generates a key with the CShims `EVP_EC_gen`/`EVP_RSA_gen` wrappers; traps on failure
/// (only possible without memory or randomness).
func generateKey(_ generate: () -> OpaquePointer?) -> EVPKey {
    guard let key = generate() else { OpenSSLSupport.fatal("key generation failed") }
    return EVPKey(taking: key)
}
