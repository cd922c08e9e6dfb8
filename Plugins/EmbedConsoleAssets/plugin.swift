import Foundation
import PackagePlugin

/// Build-tool plugin: compiles the console's static files into the `LiveRelayConsole` module.
///
/// Every file of the target that is not Swift (`Sources/LiveRelayConsole/Assets/*`: HTML, CSS,
/// JavaScript, SVG) is handed to the `ConsoleEmbedder` tool, which writes one Swift file
/// (`ConsoleEmbeddedFiles.swift`, base64 string literals) into the plugin's work directory; SwiftPM
/// compiles it with the target and re-runs the tool whenever one of the files changes. The binary
/// therefore carries the console itself: no resource bundle beside the executable, nothing read
/// from disk at run time (docs/console.md, "How the files get into the binary").
@main
struct EmbedConsoleAssets: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let module = target as? SourceModuleTarget else { return [] }
        let inputs = module.sourceFiles.filter { $0.type != .source && $0.type != .header }.map(\.url)
            .sorted { $0.path < $1.path }
        let output = context.pluginWorkDirectoryURL.appending(path: "ConsoleEmbeddedFiles.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(inputs.count) console files",
                executable: try context.tool(named: "ConsoleEmbedder").url,
                arguments: [output.path] + inputs.map(\.path),
                inputFiles: inputs, outputFiles: [output])
        ]
    }
}
