import Foundation
import Locking

/// What a finished child process left: its exit status and everything it printed.
public struct ChildProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
    /// `stdout`, under the short name some suites use.
    public var out: String { stdout }
    /// `stderr`, under the short name some suites use.
    public var err: String { stderr }
}

/// Runs programs the tests check from the outside: the built `liverelay` executable, the
/// `openssl` CLI, nghttp2's tools.
public enum ChildProcess {
    /// The built `liverelay` executable: next to the running test bundle or in a directory
    /// above the test binary (the same build directory; `swift build --build-tests` builds
    /// both), else `<repo>/.build/debug/liverelay`; `FixtureFailure` when none exists.
    public static func liverelayExecutable() throws -> String {
        var candidates: [String] = []
        for b in Bundle.allBundles where b.bundlePath.hasSuffix(".xctest") {
            candidates.append(URL(fileURLWithPath: b.bundlePath).deletingLastPathComponent().appendingPathComponent("liverelay").path)
        }
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        for _ in 0..<4 {
            dir = dir.deletingLastPathComponent()
            candidates.append(dir.appendingPathComponent("liverelay").path)
        }
        candidates.append(TestDatabase.repoRoot + "/.build/debug/liverelay")
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw FixtureFailure("the liverelay executable is not built (looked in \(candidates)); run swift build first")
        }
        return found
    }

    /// Runs `executable arguments…` to its end and returns its status and output. Both pipes
    /// are read at once, so a child filling one never blocks.
    /// - Parameters:
    ///   - environment: the child's whole environment; `nil` inherits this process's.
    ///   - directory: the working directory; `nil` keeps this process's.
    ///   - stdin: written to the child's standard input, which is then closed.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        directory: URL? = nil, stdin: String? = nil
    ) throws -> ChildProcessResult {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        if let environment { p.environment = environment }
        if let directory { p.currentDirectoryURL = directory }
        let out = Pipe(), err = Pipe(), inp = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = inp
        try p.run()
        if let stdin { inp.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? inp.fileHandleForWriting.close()
        let errData = Locked(Data())
        let errDone = DispatchSemaphore(value: 0)
        let reader = Thread {
            let d = err.fileHandleForReading.readDataToEndOfFile()
            errData.withLock { $0 = d }
            errDone.signal()
        }
        reader.start()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        errDone.wait()
        p.waitUntilExit()
        return ChildProcessResult(
            status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self),
            stderr: String(decoding: errData.current, as: UTF8.self))
    }
}

/// A child process left running while the test talks to it; its stderr is collected as it
/// arrives so the test can wait for a line instead of sleeping.
public final class BackgroundProcess: @unchecked Sendable {  // `text` only under `cond`
    public let process = Process()
    private let cond = NSCondition()
    private var text = ""

    /// Starts `executable arguments…` with `environment` in `directory`; stdout is discarded.
    public init(_ executable: String, _ arguments: [String], environment: [String: String], directory: URL) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.currentDirectoryURL = directory
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        err.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self, !d.isEmpty else { return }
            self.cond.lock(); self.text += String(decoding: d, as: UTF8.self); self.cond.broadcast(); self.cond.unlock()
        }
        try process.run()
    }

    /// Waits (on arriving output, up to `seconds`) for a stderr line containing `needle`;
    /// returns it, or `nil` when the process exited or the time ran out first.
    public func waitForLine(containing needle: String, seconds: Double = 60) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        cond.lock()
        defer { cond.unlock() }
        while true {
            if let line = text.split(separator: "\n").first(where: { $0.contains(needle) }) { return String(line) }
            if !process.isRunning || !cond.wait(until: deadline) { return nil }
        }
    }

    /// Everything written to stderr so far.
    public var output: String { cond.lock(); defer { cond.unlock() }; return text }

    /// SIGTERM (when still running) and waits for the exit.
    public func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}
