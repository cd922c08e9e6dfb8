import Foundation
import XCTest
import LiveRelayTestSupport

/// Helpers for checking this module's output with the independent `openssl` command-line tool.
enum OpenSSLCLI {
    static let path = "/usr/bin/openssl"
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// Fails the calling test (never skips it) when the `openssl` tool is missing
    /// (Debian `openssl`; deploy/local/test installs it).
    static func require() throws {
        guard isAvailable else { throw FixtureFailure("openssl CLI not installed at \(path)") }
    }

    /// Runs `openssl <arguments>` and returns its exit status and combined stdout/stderr.
    static func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// A temporary directory removed on `cleanup()`.
struct TempDir {
    let url: URL
    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("crypto-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let file = url.appendingPathComponent(name)
        try Data(bytes).write(to: file)
        return file.path
    }
    func write(_ name: String, _ text: String) throws -> String { try write(name, Array(text.utf8)) }
    func cleanup() { try? FileManager.default.removeItem(at: url) }
}

/// Test-side DER encoding of an ECDSA-Sig-Value from raw r‖s, written independently of the
/// module's OpenSSL-based conversion so the CLI check does not trust the code under test.
func derECDSASignature(raw: [UInt8]) -> [UInt8] {
    func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var v = Array(bytes.drop { $0 == 0 })
        if v.isEmpty { v = [0] }
        if v[0] & 0x80 != 0 { v.insert(0, at: 0) }
        return [0x02, UInt8(v.count)] + v
    }
    let body = integer(raw[0..<32]) + integer(raw[32..<64])
    return [0x30, UInt8(body.count)] + body
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var chars = Array(hex.utf8)[...]
    while chars.count >= 2 {
        out.append(UInt8(String(decoding: chars.prefix(2), as: UTF8.self), radix: 16)!)
        chars = chars.dropFirst(2)
    }
    return out
}

/// PEM text for DER bytes under `label`.
func pem(_ label: String, der: [UInt8]) -> String {
    "-----BEGIN \(label)-----\n" + Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        + "\n-----END \(label)-----\n"
}

/// Key fixtures generated once with the openssl CLI (test keys, not secrets).
enum Fixtures {
    /// `openssl ecparam -name secp384r1 -genkey | openssl pkcs8 -topk8 -nocrypt`
    static let p384PKCS8 = """
        -----BEGIN PRIVATE KEY-----
        MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDA7ViVvU+Ud4+pm4O7V
        8gQDZI5met3d6V6S+m/+R3JbXFfeQN8uANrxmIilTTjYvXKhZANiAARIO3vI3+i8
        xOQII+RUA4+7cqzxxa5Ys2IA2a/aDcSsLP+E7uLtgDFSSOaGoIxNdS86+gZO+rKl
        6iY5PwjMeMcF2NvgBlYZFKBbg5AzAVX8VSXeZBVJHNmALOCP1zAh5QI=
        -----END PRIVATE KEY-----
        """
    /// `openssl ecparam -name prime256v1 -genkey -noout` (SEC 1 "EC PRIVATE KEY").
    static let p256SEC1 = """
        -----BEGIN EC PRIVATE KEY-----
        MHcCAQEEIKIxIhxLb3tSrTfdc6sLtqtZNfZnHPaiWHZNdS8UvaT5oAoGCCqGSM49
        AwEHoUQDQgAEJoDi5xwITVW59/+ehCgETbJoXemis7iGPA8KTMRiufy8/sC9PP2V
        3EIazLKmQTh6w9QEeeDGv3omwkPWVdip8Q==
        -----END EC PRIVATE KEY-----
        """
    /// `openssl genpkey -algorithm ed25519`
    static let ed25519 = """
        -----BEGIN PRIVATE KEY-----
        MC4CAQAwBQYDK2VwBCIEIEoU3i8qKdmjjdu6pxlJB6CPO3/hkxU09zQ2Ntz0G/A2
        -----END PRIVATE KEY-----
        """
    /// P-256 key encrypted with password "secret" (must be refused, never prompt).
    static let encryptedP256 = """
        -----BEGIN ENCRYPTED PRIVATE KEY-----
        MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAhtuZtgUIZn9QICCAAw
        DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEPE/CBRj0AvCws6xB9Q3JzYEgZCQ
        K4jmDgd9aj26exJtq4ZLE1fiEgfFsNNyqDHgkQtiUk/64Xbf7pTn/fkQM4aBiHmZ
        iyLJvO9RauOPzl7FmKBNJWom6zHRH2QjB91Tqrki99RHSZI1slZrtUxdcBFJJgcO
        L+HVpujQYxP96F2f0C2npbvQITADyk7C/BO1xeLIAeMBI2dZmiW7/xWocTPrrEE=
        -----END ENCRYPTED PRIVATE KEY-----
        """
}
