import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// Minimal X.509 (RFC 5280) issuance for the local APNs/FCM sandbox's TLS: a self-signed CA
/// and server certificates it signs. Development and tests only: production talks to Apple
/// and Google, whose certificates come from the system trust store.
///
/// All keys are P-256 and all signatures ECDSA with SHA-256. `notBefore` is backdated one
/// hour so small clock differences between processes do not reject a fresh certificate.
public enum X509 {
    /// A certificate and its private key, both PEM ("BEGIN CERTIFICATE", PKCS#8
    /// "BEGIN PRIVATE KEY"). The key is secret: never log it.
    public struct Identity: Sendable {
        /// "-----BEGIN CERTIFICATE-----" PEM.
        public let certificatePEM: String
        /// PKCS#8 PEM ("BEGIN PRIVATE KEY" block) of the certificate's key.
        public let privateKeyPEM: String

        /// Pairs a certificate with its key (no consistency check here; `issueServerCertificate`
        /// checks the CA pair it is given).
        public init(certificatePEM: String, privateKeyPEM: String) {
            self.certificatePEM = certificatePEM
            self.privateKeyPEM = privateKeyPEM
        }
    }

    /// Creates a self-signed CA: fresh P-256 key, subject and issuer `CN=<commonName>`,
    /// random 128-bit serial, `basicConstraints` critical CA:TRUE, `keyUsage` critical
    /// keyCertSign + cRLSign + digitalSignature, subject/authority key identifiers.
    /// - Parameters:
    ///   - commonName: 1…64 UTF-8 bytes.
    ///   - validDays: lifetime in days from now, 1…36 500.
    /// - Throws: `CryptoError` for invalid arguments or an OpenSSL failure.
    public static func makeCertificateAuthority(commonName: String, validDays: Int = 3650) throws -> Identity {
        try issue(
            commonName: commonName, validDays: validDays, issuer: nil, signingKey: nil,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE"),
                (NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always")
            ])
    }

    /// Issues a TLS server certificate signed by `ca`: fresh P-256 key, `CN=<hosts[0]>`,
    /// `subjectAltName` with `IP:` for each IPv4/IPv6 literal and `DNS:` for each other host,
    /// `extendedKeyUsage` serverAuth, `keyUsage` critical digitalSignature,
    /// `basicConstraints` critical CA:FALSE, subject/authority key identifiers.
    /// - Parameters:
    ///   - ca: an identity from `makeCertificateAuthority` (any CA whose key matches).
    ///   - hosts: at least one; DNS names of letters, digits, `-` and `.` (an optional leading
    ///     `*.` wildcard), or IP literals, e.g. `["localhost", "127.0.0.1", "::1"]`.
    ///   - validDays: lifetime in days from now, 1…36 500 (default 825, the CA/Browser limit).
    /// - Throws: `CryptoError` for an unreadable CA, a CA key not matching its certificate, a
    ///   non-CA certificate, an invalid host, or an OpenSSL failure.
    public static func issueServerCertificate(ca: Identity, hosts: [String], validDays: Int = 825) throws -> Identity {
        guard let first = hosts.first else { throw CryptoError("at least one host is required") }
        let san = try hosts.map(subjectAltNameEntry).joined(separator: ",")
        let caKey = try EVPKey.readPrivate(pem: ca.privateKeyPEM)
        let caCert = try CertificateBuilder.read(pem: ca.certificatePEM)
        defer { X509_free(caCert) }
        guard X509_check_private_key(caCert, caKey.pointer) == 1 else {
            ERR_clear_error()
            throw CryptoError("CA private key does not match the CA certificate")
        }
        guard X509_check_ca(caCert) >= 1 else { throw CryptoError("certificate is not a CA") }

        return try issue(
            commonName: first, validDays: validDays, issuer: caCert, signingKey: caKey,
            extensions: [
                (NID_basic_constraints, "critical,CA:FALSE"),
                (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "serverAuth"),
                (NID_subject_alt_name, san),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always")
            ])
    }

    /// A fresh P-256 key and a certificate for it: subject `CN=<commonName>`, valid `validDays`
    /// from now, issued by `issuer` with `extensions` (nil: self-signed) and signed with
    /// `signingKey` (nil: the new key itself).
    /// - Throws: `CryptoError` for invalid arguments or an OpenSSL failure.
    static func issue(
        commonName: String, validDays: Int, issuer: OpaquePointer?, signingKey: EVPKey?, extensions: [(Int32, String)]
    ) throws -> Identity {
        let key = P256PrivateKey.generate()
        let cert = try CertificateBuilder(subjectCN: commonName, validDays: validDays, publicKey: key.key)
        try cert.setIssuer(issuer)
        try cert.addExtensions(issuer: issuer, extensions)
        try cert.sign(with: signingKey ?? key.key)
        return Identity(certificatePEM: try cert.pem(), privateKeyPEM: key.pkcs8PEM)
    }

    /// `IP:<literal>` or `DNS:<name>` after validation (no commas or other characters that
    /// could smuggle extra entries into OpenSSL's extension syntax).
    static func subjectAltNameEntry(_ host: String) throws -> String {
        if isIPLiteral(host) { return "IP:" + host }
        let utf8 = Array(host.utf8)
        guard !utf8.isEmpty, utf8.count <= 253 else { throw CryptoError("invalid host name") }
        var labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.first == "*" && labels.count > 2 { labels.removeFirst() }
        for label in labels {
            guard !label.isEmpty, label.utf8.count <= 63, !label.hasPrefix("-"), !label.hasSuffix("-"),
                label.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D })
            else { throw CryptoError("invalid host name") }
        }
        return "DNS:" + host
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return buffer.withUnsafeMutableBytes { b in
            inet_pton(AF_INET, host, b.baseAddress) == 1 || inet_pton(AF_INET6, host, b.baseAddress) == 1
        }
    }
}
