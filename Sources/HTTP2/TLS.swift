#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import CShims

/// OpenSSL contexts and handshakes for HTTP/2 over TLS: TLS 1.2 or newer, ALPN `h2`
/// (RFC 7301; RFC 9113 §3.2). Internal: `SSL_CTX`/`SSL` pointers never leave this module.
enum TLS {
    /// First reason string of this thread's OpenSSL error queue (then cleared).
    static func errorText() -> String {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0, let text = ERR_reason_error_string(code) else { return "unknown OpenSSL error" }
        return String(cString: text)
    }

    /// ALPN protocol list in wire format: one length-prefixed entry, "h2".
    static let alpnH2: [UInt8] = [2, 0x68, 0x32]

    /// A client context: system CAs plus `extraCAFile`, peer verification on, TLS ≥ 1.2,
    /// ALPN "h2", partial writes allowed. Throws `.tls` when the CA file cannot be loaded.
    static func clientContext(extraCAFile: String?) throws(HTTP2Failure) -> OpaquePointer {
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw .tls("SSL_CTX_new: \(errorText())") }
        _ = cshim_tls_ctx_set_min_proto_version(ctx, TLS1_2_VERSION)
        _ = cshim_tls_ctx_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = SSL_CTX_set_default_verify_paths(ctx)
        if let extraCAFile, SSL_CTX_load_verify_locations(ctx, extraCAFile, nil) != 1 {
            let text = errorText()
            SSL_CTX_free(ctx)
            throw .tls("cannot load CA file \(extraCAFile): \(text)")
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        _ = alpnH2.withUnsafeBufferPointer { SSL_CTX_set_alpn_protos(ctx, $0.baseAddress, UInt32($0.count)) }
        return ctx
    }

    /// A server context from PEM text: the first certificate is the leaf, any further ones are
    /// sent as its chain; TLS ≥ 1.2; ALPN selects "h2" or rejects the handshake.
    static func serverContext(certificatePEM: String, privateKeyPEM: String) throws -> OpaquePointer {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw HTTP2Failure.tls("SSL_CTX_new: \(errorText())") }
        var ok = false
        defer { if !ok { SSL_CTX_free(ctx) } }
        _ = cshim_tls_ctx_set_min_proto_version(ctx, TLS1_2_VERSION)
        _ = cshim_tls_ctx_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        try withBIO(certificatePEM) { bio throws(HTTP2Failure) in
            guard let leaf = PEM_read_bio_X509(bio, nil, nil, nil) else { throw .tls("bad certificate PEM: \(errorText())") }
            defer { X509_free(leaf) }
            guard SSL_CTX_use_certificate(ctx, leaf) == 1 else { throw .tls("certificate rejected: \(errorText())") }
            while let extra = PEM_read_bio_X509(bio, nil, nil, nil) {
                defer { X509_free(extra) }
                _ = cshim_tls_ctx_add1_chain_cert(ctx, extra)
            }
            ERR_clear_error()
        }
        try withBIO(privateKeyPEM) { bio throws(HTTP2Failure) in
            guard let key = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else { throw .tls("bad private key PEM: \(errorText())") }
            defer { EVP_PKEY_free(key) }
            guard SSL_CTX_use_PrivateKey(ctx, key) == 1, SSL_CTX_check_private_key(ctx) == 1 else {
                throw .tls("private key does not match the certificate: \(errorText())")
            }
        }
        SSL_CTX_set_alpn_select_cb(
            ctx,
            { _, out, outlen, input, inlen, _ in
                guard let out, let outlen, let input else { return SSL_TLSEXT_ERR_ALERT_FATAL }
                var i = 0
                let count = Int(inlen)
                while i < count {
                    let len = Int(input[i])
                    if len == 2, i + 2 < count, input[i + 1] == 0x68, input[i + 2] == 0x32 {
                        out.pointee = input + i + 1
                        outlen.pointee = 2
                        return SSL_TLSEXT_ERR_OK
                    }
                    i += 1 + len
                }
                return SSL_TLSEXT_ERR_ALERT_FATAL
            }, nil)
        ok = true
        return ctx
    }

    private static func withBIO(_ text: String, _ body: (OpaquePointer) throws(HTTP2Failure) -> Void) throws(HTTP2Failure) {
        let bytes = Array(text.utf8)
        let bio: OpaquePointer? = bytes.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        // BIO_new_mem_buf does not copy: keep `bytes` alive while the BIO is used.
        guard let bio else { throw .tls("cannot allocate BIO") }
        defer { BIO_free(bio); withExtendedLifetime(bytes) {} }
        try body(bio)
    }

    /// Creates the client `SSL` for `fd`: SNI (unless `host` is an IP literal) and host name
    /// or IP verification against the certificate's SAN (RFC 6125), then handshakes until
    /// `deadline` and checks that ALPN selected "h2". Throws `.tls` on any failure
    /// (`.notProcessed` on timeout or socket error).
    static func connect(fd: Int32, context: OpaquePointer, host: String, deadline: Double) throws(HTTP2Failure) -> OpaquePointer {
        guard let ssl = SSL_new(context) else { throw .tls("SSL_new: \(errorText())") }
        var ok = false
        defer { if !ok { SSL_free(ssl) } }
        SSL_set_fd(ssl, fd)
        let param = SSL_get0_param(ssl)
        if isIPLiteral(host) {
            _ = X509_VERIFY_PARAM_set1_ip_asc(param, host)
        } else {
            _ = cshim_tls_set_host_name(ssl, host)
            _ = SSL_set1_host(ssl, host)
        }
        SSL_set_connect_state(ssl)
        try handshake(ssl, fd: fd, deadline: deadline)
        var proto: UnsafePointer<UInt8>? = nil
        var len: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &proto, &len)
        guard let proto, len == 2, proto[0] == 0x68, proto[1] == 0x32 else {
            throw .tls("server did not select ALPN h2")
        }
        ok = true
        return ssl
    }

    /// Drives `SSL_do_handshake` on a non-blocking socket until done or `deadline`.
    static func handshake(_ ssl: OpaquePointer, fd: Int32, deadline: Double) throws(HTTP2Failure) {
        while true {
            ERR_clear_error()
            let rc = SSL_do_handshake(ssl)
            if rc == 1 { return }
            let code = SSL_get_error(ssl, rc)
            let events: Int16
            switch code {
            case SSL_ERROR_WANT_READ: events = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: events = Int16(POLLOUT)
            default:
                let verify = SSL_get_verify_result(ssl)
                if verify != Int(X509_V_OK) {
                    ERR_clear_error()
                    throw .tls("certificate verification failed: \(String(cString: X509_verify_cert_error_string(verify)))")
                }
                if code == SSL_ERROR_SYSCALL {
                    let e = errno
                    throw .tls("handshake: connection closed\(e == 0 ? "" : ": " + Socket.errorText(e))")
                }
                throw .tls("handshake failed: \(errorText())")
            }
            if !Socket.wait(fd, events: events, deadline: deadline) {
                throw .notProcessed(reason: "TLS handshake timed out")
            }
        }
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return buffer.withUnsafeMutableBytes { b in
            inet_pton(AF_INET, host, b.baseAddress) == 1 || inet_pton(AF_INET6, host, b.baseAddress) == 1
        }
    }
}
