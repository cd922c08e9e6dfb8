// ConsoleEmbedder OUTPUT INPUT...: writes OUTPUT, a Swift file declaring
// `enum ConsoleEmbeddedFiles { static let base64: [String: String] }` that maps each INPUT's file
// name (no directory) to its bytes in base64. Run by the EmbedConsoleAssets build-tool plugin at
// build time (docs/console.md); base64 keeps any byte sequence a valid, quickly compiled literal.
// Exits 1 (with a message on stderr) when an input cannot be read or two inputs share a name.
import Foundation

let arguments = CommandLine.arguments
guard arguments.count >= 2 else {
    FileHandle.standardError.write(Data("usage: ConsoleEmbedder OUTPUT INPUT...\n".utf8))
    exit(2)
}
var seen: Set<String> = []
var lines: [String] = []
for path in arguments.dropFirst(2) {
    let url = URL(fileURLWithPath: path)
    let name = url.lastPathComponent
    guard seen.insert(name).inserted else {
        FileHandle.standardError.write(Data("ConsoleEmbedder: two console files are named \(name)\n".utf8))
        exit(1)
    }
    guard let data = FileManager.default.contents(atPath: path) else {
        FileHandle.standardError.write(Data("ConsoleEmbedder: cannot read \(path)\n".utf8))
        exit(1)
    }
    lines.append("        \"\(name)\": \"\(data.base64EncodedString())\",")
}
let source = """
    // Generated at build time by ConsoleEmbedder (EmbedConsoleAssets plugin); do not edit.
    /// The console's files: file name → contents in base64.
    enum ConsoleEmbeddedFiles {
        static let base64: [String: String] = [
    \(lines.isEmpty ? "        :" : lines.joined(separator: "\n"))
        ]
    }

    """
do {
    let existing = FileManager.default.contents(atPath: arguments[1])
    if existing != Data(source.utf8) { try Data(source.utf8).write(to: URL(fileURLWithPath: arguments[1])) }
} catch {
    FileHandle.standardError.write(Data("ConsoleEmbedder: cannot write \(arguments[1]): \(error)\n".utf8))
    exit(1)
}
