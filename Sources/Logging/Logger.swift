import Foundation
import JSON
import Locking

/// Log severities, lowest first (`LIVERELAY_LOG_LEVEL`, docs/configuration.md: `debug`…`error`).
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case debug = 0
    case info, warning, error

    /// The name used in configuration and in each line's `level` field.
    public var name: String {
        switch self {
        case .debug: return "debug"
        case .info: return "info"
        case .warning: return "warning"
        case .error: return "error"
        }
    }

    /// Parses `debug`, `info`, `warning` (or `warn`), `error`.
    public init?(name: String) {
        switch name.lowercased() {
        case "debug": self = .debug
        case "info": self = .info
        case "warning", "warn": self = .warning
        case "error": self = .error
        default: return nil
        }
    }

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// Structured logger: one JSON object per line on standard error,
/// `{"ts":"…Z","level":"info","msg":"…", …fields}`. Callers must never pass secrets or push
/// tokens as fields (use fingerprints).
public struct Logger: Sendable {
    /// Lines below this level are dropped.
    public let minimum: LogLevel
    /// Fields added to every line of this logger (e.g. `component`).
    public let context: [String: JSONValue]
    private let sink: @Sendable (String) -> Void

    /// - Parameters:
    ///   - minimum: lowest level written.
    ///   - sink: where finished lines go (default: standard error, one write per line).
    public init(minimum: LogLevel = .info, context: [String: JSONValue] = [:], sink: (@Sendable (String) -> Void)? = nil) {
        self.minimum = minimum
        self.context = context
        self.sink = sink ?? Logger.stderrSink
    }

    /// A logger with `fields` added to every line.
    public func with(_ fields: [String: JSONValue]) -> Logger {
        Logger(minimum: minimum, context: context.merging(fields) { $1 }, sink: sink)
    }

    /// Writes `message` at `level` with extra `fields`.
    public func log(_ level: LogLevel, _ message: String, _ fields: [String: JSONValue] = [:]) {
        guard level >= minimum else { return }
        var o = context.merging(fields) { $1 }
        o["ts"] = .string(Logger.now())
        o["level"] = .string(level.name)
        o["msg"] = .string(message)
        sink(JSONValue.object(o).jsonString)
    }

    public func debug(_ m: String, _ f: [String: JSONValue] = [:]) { log(.debug, m, f) }
    public func info(_ m: String, _ f: [String: JSONValue] = [:]) { log(.info, m, f) }
    public func warning(_ m: String, _ f: [String: JSONValue] = [:]) { log(.warning, m, f) }
    public func error(_ m: String, _ f: [String: JSONValue] = [:]) { log(.error, m, f) }

    /// Writes a raw, already-formatted JSON line (e.g. from the HTTP server: access-log lines
    /// at `info`, handler errors at `error`) when its own `"level"` is enabled; a line without a
    /// recognisable level counts as `info`.
    public func raw(_ line: String) {
        var level = LogLevel.info
        if let r = line.range(of: "\"level\":\"") {
            let rest = line[r.upperBound...]
            if let end = rest.firstIndex(of: "\""), let l = LogLevel(name: String(rest[..<end])) { level = l }
        }
        if level >= minimum { sink(line) }
    }

    static let lock = Locked(())
    /// Writes `line` + newline to standard error atomically with respect to other log lines.
    public static let stderrSink: @Sendable (String) -> Void = { line in
        let data = Array((line + "\n").utf8)
        lock.withLock { _ in
            data.withUnsafeBytes { p in
                var off = 0
                while off < p.count {
                    let n = Foundation.write(2, p.baseAddress! + off, p.count - off)
                    if n <= 0 { break }
                    off += n
                }
            }
        }
    }

    static func now() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        let d = Date(timeIntervalSince1970: Double(tv.tv_sec) + Double(tv.tv_usec) / 1e6)
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: d)
    }
}
