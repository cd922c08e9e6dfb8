#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import CShims

/// The byte stream under one HTTP/2 session: a non-blocking TCP socket, with OpenSSL TLS on
/// top unless cleartext (h2c prior knowledge, tests only). Used by one I/O thread at a time;
/// owns the socket and the `SSL` object and frees both in `close()`.
final class Transport {
    /// Outcome of one non-blocking read or write.
    enum IOResult {
        case bytes(Int)
        /// Retry when the socket is readable (`wantWrite == false`) or writable.
        case wouldBlock(wantWrite: Bool)
        /// Orderly end of stream from the peer.
        case closed
        case failed(String)
    }

    let fd: Int32
    private(set) var ssl: OpaquePointer?
    private var isClosed = false

    init(fd: Int32, ssl: OpaquePointer?) {
        self.fd = fd
        self.ssl = ssl
    }

    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> IOResult {
        guard let ssl else {
            let n = recv(fd, buffer, count, 0)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                ? .wouldBlock(wantWrite: false) : .failed(Socket.errorText(errno))
        }
        ERR_clear_error()
        let n = SSL_read(ssl, buffer, Int32(min(count, Int(Int32.max))))
        if n > 0 { return .bytes(Int(n)) }
        return Self.classify(ssl, n)
    }

    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> IOResult {
        guard let ssl else {
            let n = send(fd, buffer, count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                ? .wouldBlock(wantWrite: true) : .failed(Socket.errorText(errno))
        }
        ERR_clear_error()
        let n = SSL_write(ssl, buffer, Int32(min(count, 1 << 20)))
        if n > 0 { return .bytes(Int(n)) }
        return Self.classify(ssl, n)
    }

    private static func classify(_ ssl: OpaquePointer, _ rc: Int32) -> IOResult {
        let code = SSL_get_error(ssl, rc)
        switch code {
        case SSL_ERROR_WANT_READ: return .wouldBlock(wantWrite: false)
        case SSL_ERROR_WANT_WRITE: return .wouldBlock(wantWrite: true)
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            let e = errno
            return e == 0 ? .closed : .failed("TLS I/O: \(Socket.errorText(e))")
        default: return .failed("TLS: \(TLS.errorText())")
        }
    }

    /// Takes ownership of `ssl` (server side: created after accept, before the handshake).
    func adoptSSL(_ ssl: OpaquePointer) { self.ssl = ssl }

    /// Sends close_notify best-effort (TLS) and closes the socket. Idempotent.
    func close() {
        if isClosed { return }
        isClosed = true
        if let ssl {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
            SSL_free(ssl)
            self.ssl = nil
        }
        Glibc.close(fd)
    }

    /// Closes the socket immediately without close_notify (fault injection: simulates a lost
    /// connection). Idempotent.
    func abort() {
        if isClosed { return }
        isClosed = true
        if let ssl { SSL_free(ssl); self.ssl = nil }
        Glibc.close(fd)
    }

    deinit { abort() }
}
