import Foundation
import Crypto
import JSON

/// The files `liverelay sandbox` writes (and reuses on the next start, so credentials stored in
/// LiveRelay stay valid):
///
/// | file | content |
/// | --- | --- |
/// | `ca.pem` | the sandbox CA certificate: point `LIVERELAY_EXTRA_CA_FILE` at it |
/// | `ca-key.pem` | the CA's private key (0600), to issue the next run's server certificate |
/// | `apns-key.p8` | the demo APNs token-signing key, PKCS#8 P-256 (0600) |
/// | `apns.json` | `{"team_id", "key_id", "key_file": "apns-key.p8"}` |
/// | `fcm-service-account.json` | Google service-account key file (0600) whose `token_uri` is this sandbox's `/token` |
/// | `env` | the `LIVERELAY_*` lines that point LiveRelay at the sandbox |
enum SandboxFiles {
    struct Loaded {
        let ca: X509.Identity
        let apnsKey: P256PrivateKey
        let teamId, keyId: String
        let serviceAccountKey: RSAPrivateKey
        let projectId, clientEmail, privateKeyId: String
    }

    static func load(_ dir: URL) -> Loaded? {
        func text(_ name: String) -> String? { try? String(contentsOf: dir.appendingPathComponent(name), encoding: .utf8) }
        guard let caPEM = text("ca.pem"), let caKey = text("ca-key.pem"), let p8 = text("apns-key.p8"),
            let apnsJSON = text("apns.json").flatMap({ try? JSONValue.parse($0) }),
            let sa = text("fcm-service-account.json").flatMap({ try? JSONValue.parse($0) }),
            let apnsKey = try? P256PrivateKey(pem: p8), let teamId = apnsJSON["team_id"]?.stringValue,
            let keyId = apnsJSON["key_id"]?.stringValue, let saPEM = sa["private_key"]?.stringValue,
            let saKey = try? RSAPrivateKey(pem: saPEM), let project = sa["project_id"]?.stringValue,
            let email = sa["client_email"]?.stringValue, let pkid = sa["private_key_id"]?.stringValue
        else { return nil }
        // The CA pair must still be usable to issue a server certificate.
        let ca = X509.Identity(certificatePEM: caPEM, privateKeyPEM: caKey)
        guard (try? X509.issueServerCertificate(ca: ca, hosts: ["localhost"])) != nil else { return nil }
        return Loaded(
            ca: ca, apnsKey: apnsKey, teamId: teamId, keyId: keyId, serviceAccountKey: saKey, projectId: project,
            clientEmail: email, privateKeyId: pkid)
    }

    static func write(_ sandbox: Sandbox, to dir: URL) throws -> [String: String] {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var written: [String: String] = [:]
        func put(_ name: String, _ text: String, secret: Bool) throws {
            let url = dir.appendingPathComponent(name)
            try text.write(to: url, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: secret ? 0o600 : 0o644], ofItemAtPath: url.path)
            written[name] = url.standardizedFileURL.path
        }
        try put("ca.pem", sandbox.ca.certificatePEM, secret: false)
        try put("ca-key.pem", sandbox.ca.privateKeyPEM, secret: true)
        try put("apns-key.p8", sandbox.apnsKey.pkcs8PEM, secret: true)
        try put(
            "apns.json",
            String(
                decoding: JSONValue.object([
                    "team_id": .string(sandbox.teamId), "key_id": .string(sandbox.keyId),
                    "key_file": "apns-key.p8"
                ]).serialized(), as: UTF8.self) + "\n", secret: false)
        try put("fcm-service-account.json", String(decoding: sandbox.serviceAccountJSON.serialized(), as: UTF8.self) + "\n", secret: true)
        try put("env", sandbox.environmentLines(caFile: written["ca.pem"]).joined(separator: "\n") + "\n", secret: false)
        return written
    }
}
