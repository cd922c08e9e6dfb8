import COpenSSL

/// Owner of one `X509` under construction, freed on deinit. Internal to `X509`.
final class CertificateBuilder {
    let cert: OpaquePointer

    /// A v3 certificate with a random positive 128-bit serial, validity
    /// [now − 1 h, now + validDays], subject `CN=subjectCN` and `publicKey`.
    init(subjectCN: String, validDays: Int, publicKey: EVPKey) throws {
        guard (1...36_500).contains(validDays) else { throw CryptoError("validDays must be 1...36500") }
        let cnBytes = Array(subjectCN.utf8)
        guard (1...64).contains(cnBytes.count), !cnBytes.contains(0) else {
            throw CryptoError("common name must be 1...64 bytes")
        }
        ERR_clear_error()
        guard let cert = X509_new() else { throw OpenSSLSupport.error("cannot allocate certificate") }
        self.cert = cert
        guard X509_set_version(cert, 2) == 1 else { throw OpenSSLSupport.error("cannot set certificate version") }
        try setSerial()
        guard X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nil,
            X509_time_adj_ex(X509_getm_notAfter(cert), Int32(validDays), 0, nil) != nil
        else {
            throw OpenSSLSupport.error("cannot set certificate validity")
        }
        guard X509_set_pubkey(cert, publicKey.pointer) == 1 else { throw OpenSSLSupport.error("cannot set public key") }
        guard let name = X509_NAME_new() else { throw OpenSSLSupport.error("cannot allocate name") }
        defer { X509_NAME_free(name) }
        let added = cnBytes.withUnsafeBufferPointer {
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, $0.baseAddress, Int32($0.count), -1, 0)
        }
        guard added == 1, X509_set_subject_name(cert, name) == 1 else {
            throw OpenSSLSupport.error("cannot set subject name")
        }
    }

    deinit { X509_free(cert) }

    /// Parses a "BEGIN CERTIFICATE" PEM; the caller frees the result with `X509_free`.
    static func read(pem: String) throws -> OpaquePointer {
        try OpenSSLSupport.withReadBIO(pem, "certificate PEM") { bio in
            guard let cert = PEM_read_bio_X509(bio, nil, pemRefusePassword, nil) else {
                throw OpenSSLSupport.error("cannot read certificate PEM")
            }
            return cert
        }
    }

    private func setSerial() throws {
        var serial = SecureRandom.bytes(16)
        serial[0] = (serial[0] & 0x7F) | 0x01  // positive, never zero, 16 significant bytes
        guard let bn = serial.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else {
            throw OpenSSLSupport.error("cannot allocate serial")
        }
        defer { BN_free(bn) }
        guard BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nil else {
            throw OpenSSLSupport.error("cannot set serial number")
        }
    }

    /// Issuer name from `issuer`'s subject, or this certificate's own subject when `nil`
    /// (self-signed).
    func setIssuer(_ issuer: OpaquePointer?) throws {
        guard X509_set_issuer_name(cert, X509_get_subject_name(issuer ?? cert)) == 1 else {
            throw OpenSSLSupport.error("cannot set issuer name")
        }
    }

    /// Adds v3 extensions written in OpenSSL's configuration syntax (x509v3_config(5)), in
    /// order (the subject key identifier must precede the authority key identifier of a
    /// self-signed certificate). `issuer` nil means self-signed.
    func addExtensions(issuer: OpaquePointer?, _ extensions: [(Int32, String)]) throws {
        var ctx = X509V3_CTX()
        X509V3_set_ctx(&ctx, issuer ?? cert, cert, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_nconf_nid(nil, &ctx, nid, value) else {
                throw OpenSSLSupport.error("cannot build certificate extension")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(cert, ext, -1) == 1 else { throw OpenSSLSupport.error("cannot add certificate extension") }
        }
    }

    /// Signs with `key` (ECDSA or RSA) over SHA-256.
    func sign(with key: EVPKey) throws {
        guard X509_sign(cert, key.pointer, EVP_sha256()) > 0 else { throw OpenSSLSupport.error("cannot sign certificate") }
    }

    /// "BEGIN CERTIFICATE" PEM.
    func pem() throws -> String {
        try OpenSSLSupport.writeToString("cannot write certificate PEM") { PEM_write_bio_X509($0, cert) }
    }
}
