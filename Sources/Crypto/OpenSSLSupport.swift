import COpenSSL
import CShims

/// Internal helpers shared by the OpenSSL wrappers: error-queue handling, memory BIOs and
/// non-nil buffer pointers. Nothing here is public; C types never leave this module.
enum OpenSSLSupport {
    /// Largest PEM text accepted by any parser here (bytes). Real keys and certificates are a
    /// few kilobytes; the cap keeps hostile input from costing more than that.
    static let maxPEMBytes = 64 * 1024

    /// Drains this thread's OpenSSL error queue and returns a `CryptoError` made of `context`
    /// plus the first queued reason string (a fixed OpenSSL text, never key material).
    static func error(_ context: String) -> CryptoError {
        let code = ERR_get_error()
        var reason = ""
        if code != 0, let text = ERR_reason_error_string(code) { reason = String(cString: text) }
        ERR_clear_error()
        return CryptoError(reason.isEmpty ? context : "\(context) (\(reason))")
    }

    /// Aborts on a failure that only memory exhaustion or a broken OpenSSL installation can
    /// cause (digest of in-memory bytes, random generation, key generation).
    static func fatal(_ context: String) -> Never {
        let e = error(context)
        fatalError(e.message)
    }

    /// Runs `body` with a read-only memory BIO over `text`'s UTF-8 bytes; the BIO is freed
    /// afterwards. Throws for empty or oversized input.
    static func withReadBIO<T>(_ text: String, _ what: String, _ body: (OpaquePointer) throws -> T) throws -> T {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw CryptoError("\(what) is empty") }
        guard bytes.count <= maxPEMBytes else { throw CryptoError("\(what) is larger than \(maxPEMBytes) bytes") }
        ERR_clear_error()
        return try bytes.withUnsafeBufferPointer { buf in
            guard let bio = BIO_new_mem_buf(buf.baseAddress, Int32(buf.count)) else {
                throw error("cannot allocate memory BIO")
            }
            defer { BIO_free(bio) }
            return try body(bio)
        }
    }

    /// Creates a writable memory BIO, lets `write` fill it (returning OpenSSL's 1 on success)
    /// and returns its contents as text. Throws `CryptoError(context)` when `write` fails.
    static func writeToString(_ context: String, _ write: (OpaquePointer) -> Int32) throws -> String {
        guard let method = BIO_s_mem(), let bio = BIO_new(method) else { throw error("cannot allocate memory BIO") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw error(context) }
        var data: UnsafeMutablePointer<CChar>? = nil
        let count = cshim_bio_get_mem_data(bio, &data)
        guard let data, count > 0 else { throw error(context) }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
    }

}

/// A `pem_password_cb` that refuses to supply a password, so an encrypted PEM fails instead
/// of OpenSSL prompting on the terminal.
func pemRefusePassword(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int32, _ rwflag: Int32,
    _ context: UnsafeMutableRawPointer?
) -> Int32 { -1 }

extension Array where Element == UInt8 {
    /// Calls `body` with a pointer that is never nil (OpenSSL rejects NULL even with length 0)
    /// and the element count.
    func withNonNilBytes<R>(_ body: (UnsafePointer<UInt8>, Int) throws -> R) rethrows -> R {
        if isEmpty {
            let zero: UInt8 = 0
            return try withUnsafePointer(to: zero) { try body($0, 0) }
        }
        return try withUnsafeBufferPointer { try body($0.baseAddress!, $0.count) }
    }
}

/// Lowercase hexadecimal text of `bytes` (two characters per byte).
func hexString(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count * 2)
    for b in bytes {
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
}
