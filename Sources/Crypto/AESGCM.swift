import COpenSSL

/// AES-256-GCM envelope (NIST SP 800-38D) for secrets at rest, e.g. provider keys
/// (docs/: "AES-256-GCM for provider keys at rest").
///
/// Box layout: `0x01 ‖ nonce (12 bytes, random) ‖ ciphertext (same length as plaintext) ‖
/// tag (16 bytes)`, i.e. plaintext length + 29 bytes. The version byte lets a later format
/// coexist. Random 96-bit nonces keep the nonce-collision probability negligible up to about
/// 2^32 seals under one key (SP 800-38D §8.3); rotate the key well before that.
///
/// `Sendable`: holds only an immutable copy of the key bytes. `description` never shows them.
public struct AESGCM: Sendable, CustomStringConvertible, CustomReflectable {
    /// Version byte at the start of every box.
    public static let version: UInt8 = 0x01
    /// Key length in bytes (AES-256).
    public static let keyLength = 32
    /// Nonce length in bytes.
    public static let nonceLength = 12
    /// Authentication tag length in bytes.
    public static let tagLength = 16
    /// Bytes a box adds to its plaintext: version + nonce + tag = 29.
    public static let overhead = 1 + nonceLength + tagLength

    private let key: [UInt8]

    /// Creates an envelope for `key`.
    /// - Throws: `CryptoError` unless `key` is exactly 32 bytes.
    public init(key: [UInt8]) throws {
        guard key.count == AESGCM.keyLength else {
            throw CryptoError("AES-256-GCM key must be 32 bytes, got \(key.count)")
        }
        self.key = key
    }

    /// `"AESGCM(key: <redacted>)"`.
    public var description: String { "AESGCM(key: <redacted>)" }
    /// Hides the key from `dump` and debugger mirrors.
    public var customMirror: Mirror { Mirror(self, children: [:]) }

    /// Encrypts and authenticates `plaintext`, binding `associatedData` (authenticated, not
    /// stored: pass the same bytes to `open`, e.g. the row id).
    /// - Returns: `0x01 ‖ nonce(12) ‖ ciphertext ‖ tag(16)`.
    /// - Throws: `CryptoError` on an OpenSSL failure.
    public func seal(_ plaintext: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        let nonce = SecureRandom.bytes(AESGCM.nonceLength)
        let ctx = try Context(encrypt: true, key: key, nonce: nonce)
        try ctx.addAAD(associatedData)
        let ciphertext = try ctx.update(plaintext)
        try ctx.finish()
        let tag = try ctx.tag()
        return [AESGCM.version] + nonce + ciphertext + tag
    }

    /// Verifies and decrypts a box from `seal` made under the same key and `associatedData`.
    /// - Throws: `CryptoError` for a box shorter than 29 bytes, an unknown version byte, or
    ///   failed authentication (wrong key, wrong associated data, any modified byte). No
    ///   plaintext is released unless the tag verifies.
    public func open(_ box: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        guard box.count >= AESGCM.overhead else { throw CryptoError("sealed box is truncated") }
        guard box[0] == AESGCM.version else { throw CryptoError("sealed box has an unknown version") }
        let nonce = Array(box[1..<1 + AESGCM.nonceLength])
        let ciphertext = Array(box[(1 + AESGCM.nonceLength)..<(box.count - AESGCM.tagLength)])
        let tag = Array(box[(box.count - AESGCM.tagLength)...])
        let ctx = try Context(encrypt: false, key: key, nonce: nonce)
        try ctx.addAAD(associatedData)
        var plaintext = try ctx.update(ciphertext)
        try ctx.setTag(tag)
        do { try ctx.finish() } catch {
            for i in plaintext.indices { plaintext[i] = 0 }
            throw CryptoError("sealed box failed authentication")
        }
        return plaintext
    }
}

/// One `EVP_CIPHER_CTX` for AES-256-GCM, freed on deinit.
private final class Context {
    let ctx: OpaquePointer
    let encrypt: Bool

    init(encrypt: Bool, key: [UInt8], nonce: [UInt8]) throws {
        ERR_clear_error()
        guard let ctx = EVP_CIPHER_CTX_new() else { throw OpenSSLSupport.error("cannot allocate cipher context") }
        self.ctx = ctx
        self.encrypt = encrypt
        let ok = key.withUnsafeBufferPointer { k in
            nonce.withUnsafeBufferPointer { n in
                EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), nil, k.baseAddress, n.baseAddress, encrypt ? 1 : 0)
            }
        }
        guard ok == 1 else { throw OpenSSLSupport.error("cannot initialise AES-256-GCM") }
    }

    deinit { EVP_CIPHER_CTX_free(ctx) }

    func addAAD(_ aad: [UInt8]) throws {
        guard !aad.isEmpty else { return }
        var outLength: Int32 = 0
        let ok = aad.withUnsafeBufferPointer { EVP_CipherUpdate(ctx, nil, &outLength, $0.baseAddress, Int32($0.count)) }
        guard ok == 1 else { throw OpenSSLSupport.error("AES-256-GCM associated data failed") }
    }

    func update(_ input: [UInt8]) throws -> [UInt8] {
        guard !input.isEmpty else { return [] }
        guard input.count < Int(Int32.max) - 32 else { throw CryptoError("AES-256-GCM input too large") }
        var out = [UInt8](repeating: 0, count: input.count + 16)
        var outLength: Int32 = 0
        let ok = input.withUnsafeBufferPointer { i in
            out.withUnsafeMutableBufferPointer { o in
                EVP_CipherUpdate(ctx, o.baseAddress, &outLength, i.baseAddress, Int32(i.count))
            }
        }
        guard ok == 1 else { throw OpenSSLSupport.error("AES-256-GCM update failed") }
        out.removeSubrange(Int(outLength)...)
        return out
    }

    func finish() throws {
        var scratch = [UInt8](repeating: 0, count: 16)
        var outLength: Int32 = 0
        let ok = scratch.withUnsafeMutableBufferPointer { EVP_CipherFinal_ex(ctx, $0.baseAddress, &outLength) }
        guard ok == 1 else { throw OpenSSLSupport.error("AES-256-GCM finalisation failed") }
    }

    func tag() throws -> [UInt8] {
        var tag = [UInt8](repeating: 0, count: AESGCM.tagLength)
        let ok = tag.withUnsafeMutableBytes {
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, Int32(AESGCM.tagLength), $0.baseAddress)
        }
        guard ok == 1 else { throw OpenSSLSupport.error("cannot read AES-256-GCM tag") }
        return tag
    }

    func setTag(_ tag: [UInt8]) throws {
        var copy = tag
        let ok = copy.withUnsafeMutableBytes {
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(AESGCM.tagLength), $0.baseAddress)
        }
        guard ok == 1 else { throw OpenSSLSupport.error("cannot set AES-256-GCM tag") }
    }
}
