import Foundation

/// One static file of the tenant console, as served under `/console/`.
public struct ConsoleAsset: Sendable {
    /// File name, e.g. `"console.js"` (the URL is `/console/<name>`; `index.html` is `/console/`).
    public let name: String
    /// `Content-Type` header value, e.g. `"text/javascript; charset=utf-8"`.
    public let contentType: String
    /// The file's bytes, exactly as in `Sources/LiveRelayConsole/Assets/`.
    public let bytes: [UInt8]
}

/// The console's files, compiled into the binary at build time (EmbedConsoleAssets plugin; see
/// docs/console.md). Decoded once, on first use; nothing is read from disk at run time, so a
/// binary copied anywhere serves the same console.
public enum ConsoleAssets {
    /// Every file by name.
    public static let all: [String: ConsoleAsset] = {
        var out: [String: ConsoleAsset] = [:]
        for (name, text) in ConsoleEmbeddedFiles.base64 {
            guard let data = Data(base64Encoded: text) else { continue }  // the generator writes valid base64
            out[name] = ConsoleAsset(name: name, contentType: contentType(for: name), bytes: Array(data))
        }
        return out
    }()

    /// The file named `name` (no directory part), nil when there is none.
    public static func asset(named name: String) -> ConsoleAsset? { all[name] }

    /// `Content-Type` by file extension (UTF-8 for text); `application/octet-stream` otherwise.
    public static func contentType(for name: String) -> String {
        switch name.split(separator: ".").last.map({ $0.lowercased() }) {
        case "html": return "text/html; charset=utf-8"
        case "css": return "text/css; charset=utf-8"
        case "js": return "text/javascript; charset=utf-8"
        case "svg": return "image/svg+xml"
        case "json": return "application/json"
        case "png": return "image/png"
        default: return "application/octet-stream"
        }
    }
}
