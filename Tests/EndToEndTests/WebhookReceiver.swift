import Foundation
import XCTest
import Crypto
import JSON

/// A real HTTPS webhook receiver on 127.0.0.1 for the tests: `deploy/webhooks/receiver.py` (the
/// README's Python example, standard library only) with a server certificate issued by the
/// sandbox's CA, verifying every signature against the secrets in its secret file and recording
/// each request as one JSON line. Fails the test (throws) when it cannot start.
final class WebhookReceiver: @unchecked Sendable {
    let dir: URL
    let process = Process()
    let port: Int
    let secretFile: URL
    let recordFile: URL

    init(ca: X509.Identity, tolerance: Double = 300) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("lr-hook-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let identity = try X509.issueServerCertificate(ca: ca, hosts: ["localhost", "127.0.0.1"])
        let cert = dir.appendingPathComponent("cert.pem"), key = dir.appendingPathComponent("key.pem")
        try identity.certificatePEM.write(to: cert, atomically: true, encoding: .utf8)
        try identity.privateKeyPEM.write(to: key, atomically: true, encoding: .utf8)
        secretFile = dir.appendingPathComponent("secrets")
        recordFile = dir.appendingPathComponent("requests.jsonl")
        let portFile = dir.appendingPathComponent("port")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", EndToEndHarness.repoRoot + "/deploy/webhooks/receiver.py", "--port", "0",
            "--port-file", portFile.path, "--cert", cert.path, "--key", key.path, "--secret-file", secretFile.path,
            "--record", recordFile.path, "--tolerance", String(tolerance)
        ]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let end = Date().addingTimeInterval(10)
        var p: Int?
        while Date() < end && p == nil {
            p = (try? String(contentsOf: portFile, encoding: .utf8)).flatMap { Int($0) }
            if p == nil { Thread.sleep(forTimeInterval: 0.02) }
        }
        guard let p, process.isRunning else {
            process.terminate()
            throw NSError(domain: "WebhookReceiver", code: 1, userInfo: [NSLocalizedDescriptionKey: "the receiver did not start"])
        }
        port = p
    }

    /// `https://<host>:<port><path>`.
    func url(_ path: String = "/hook", host: String = "127.0.0.1") -> String { "https://\(host):\(port)\(path)" }

    /// The secrets the receiver accepts (it re-reads them on every request).
    func setSecrets(_ secrets: [String]) throws {
        try (secrets.joined(separator: "\n") + "\n").write(to: secretFile, atomically: true, encoding: .utf8)
    }

    /// Every request received so far, oldest first.
    func requests() -> [JSONValue] {
        guard let text = try? String(contentsOf: recordFile, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }
    }

    func stop() {
        if process.isRunning { process.terminate(); process.waitUntilExit() }
        try? FileManager.default.removeItem(at: dir)
    }
}
