import Crypto
import XCTest

final class X509Tests: XCTestCase {
    func testCAAndServerCertificateVerifyWithOpenSSL() throws {
        let ca = try X509.makeCertificateAuthority(commonName: "LiveRelay Sandbox CA")
        let server = try X509.issueServerCertificate(ca: ca, hosts: ["localhost", "127.0.0.1", "::1"])
        XCTAssertTrue(ca.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        XCTAssertTrue(server.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        XCTAssertNoThrow(try P256PrivateKey(pem: ca.privateKeyPEM))
        let serverKey = try P256PrivateKey(pem: server.privateKeyPEM)

        try OpenSSLCLI.require()
        let dir = try TempDir()
        defer { dir.cleanup() }
        let caFile = try dir.write("ca.pem", ca.certificatePEM)
        let serverFile = try dir.write("server.pem", server.certificatePEM)
        let verify = try OpenSSLCLI.run(["verify", "-CAfile", caFile, "-purpose", "sslserver", "-x509_strict", serverFile])
        XCTAssertEqual(verify.status, 0, verify.output)
        XCTAssertTrue(verify.output.contains("OK"), verify.output)
        let hostCheck = try OpenSSLCLI.run(["verify", "-CAfile", caFile, "-verify_hostname", "localhost", "-verify_ip", "127.0.0.1", serverFile])
        XCTAssertEqual(hostCheck.status, 0, hostCheck.output)
        let wrongHost = try OpenSSLCLI.run(["verify", "-CAfile", caFile, "-verify_hostname", "example.com", serverFile])
        XCTAssertNotEqual(wrongHost.status, 0)

        let text = try OpenSSLCLI.run(["x509", "-noout", "-text", "-in", serverFile]).output
        XCTAssertTrue(text.contains("DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1"), text)
        XCTAssertTrue(text.contains("TLS Web Server Authentication"), text)
        XCTAssertTrue(text.contains("CA:FALSE"), text)
        XCTAssertTrue(text.contains("Subject: CN = localhost"), text)
        XCTAssertTrue(text.contains("Issuer: CN = LiveRelay Sandbox CA"), text)
        XCTAssertTrue(text.contains("ecdsa-with-SHA256"), text)
        let caText = try OpenSSLCLI.run(["x509", "-noout", "-text", "-in", caFile]).output
        XCTAssertTrue(caText.contains("CA:TRUE"), caText)
        XCTAssertTrue(caText.contains("Certificate Sign"), caText)
        let pub = try OpenSSLCLI.run(["x509", "-noout", "-pubkey", "-in", serverFile]).output
        XCTAssertEqual(pub, serverKey.publicKey.pem, "certificate must carry the returned key")

        // A certificate from a different CA must not verify.
        let otherCA = try X509.makeCertificateAuthority(commonName: "Other CA", validDays: 1)
        let foreign = try OpenSSLCLI.run(["verify", "-CAfile", try dir.write("other.pem", otherCA.certificatePEM), serverFile])
        XCTAssertNotEqual(foreign.status, 0)
    }

    func testInvalidInputsThrow() throws {
        let ca = try X509.makeCertificateAuthority(commonName: "CA")
        XCTAssertThrowsError(try X509.issueServerCertificate(ca: ca, hosts: []))
        for host in ["", "a,DNS:evil.com", "bad host", "-x.com", "a..b", "exa_mple.com"] {
            XCTAssertThrowsError(try X509.issueServerCertificate(ca: ca, hosts: [host]), host)
        }
        XCTAssertNoThrow(try X509.issueServerCertificate(ca: ca, hosts: ["*.sandbox.local", "push-1.example"]))
        let other = try X509.makeCertificateAuthority(commonName: "Other")
        let mismatched = X509.Identity(certificatePEM: ca.certificatePEM, privateKeyPEM: other.privateKeyPEM)
        XCTAssertThrowsError(try X509.issueServerCertificate(ca: mismatched, hosts: ["localhost"]))
        let leaf = try X509.issueServerCertificate(ca: ca, hosts: ["localhost"])
        XCTAssertThrowsError(try X509.issueServerCertificate(ca: leaf, hosts: ["localhost"]), "a leaf is not a CA")
        XCTAssertThrowsError(
            try X509.issueServerCertificate(ca: .init(certificatePEM: "junk", privateKeyPEM: ca.privateKeyPEM), hosts: ["localhost"]))
        XCTAssertThrowsError(try X509.makeCertificateAuthority(commonName: ""))
        XCTAssertThrowsError(try X509.makeCertificateAuthority(commonName: String(repeating: "x", count: 65)))
        XCTAssertThrowsError(try X509.makeCertificateAuthority(commonName: "CA", validDays: 0))
    }
}
