import Foundation

/// Reads environment variables for `Configuration.load`, collecting every problem (one line
/// naming the variable and what it got) instead of stopping at the first or ignoring it.
struct EnvironmentReader {
    let env: [String: String]
    private(set) var problems: [String] = []

    init(_ env: [String: String]) { self.env = env }

    /// The variable's value, nil when unset or empty.
    func string(_ k: String) -> String? { env[k].flatMap { $0.isEmpty ? nil : $0 } }

    /// Records one problem.
    mutating func problem(_ line: String) { problems.append(line) }

    /// An integer in `range`; `def` when unset or empty. Anything else is a problem (and `def`).
    mutating func int(_ k: String, _ def: Int, _ range: ClosedRange<Int>) -> Int {
        guard let s = string(k) else { return def }
        guard let v = Int(s), range.contains(v) else {
            problem("\(k) must be an integer in \(range.lowerBound)...\(range.upperBound), got \(s.debugDescription)")
            return def
        }
        return v
    }

    /// A finite number of seconds ≥ `minimum`; `def` when unset or empty. Anything else is a
    /// problem (and `def`).
    mutating func seconds(_ k: String, _ def: Double, minimum: Double) -> Double {
        guard let s = string(k) else { return def }
        guard let v = Double(s), v.isFinite, v >= minimum else {
            problem("\(k) must be a number of seconds ≥ \(minimum.formatted()), got \(s.debugDescription)")
            return def
        }
        return v
    }

    /// `host:port` with a port in 0…65535 (`[v6]:port` allowed, an empty host means all
    /// addresses); nil when unset or empty. Anything else is a problem (and nil).
    mutating func hostPort(_ k: String, example: String) -> (host: String, port: Int)? {
        guard let v = string(k) else { return nil }
        guard let colon = v.lastIndex(of: ":"), let port = Int(v[v.index(after: colon)...]), (0...65535).contains(port) else {
            problem("\(k) must be host:port (e.g. \(example)), got \(v.debugDescription)")
            return nil
        }
        var host = String(v[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host.isEmpty ? "0.0.0.0" : host, port)
    }
}

private extension Double {
    func formatted() -> String { self == rounded() ? String(Int(self)) : String(self) }
}

/// Settings of the long-running processes (`serve`, `api`, `worker`) beyond the API's, read
/// with the rest by `Configuration.load` (docs/configuration.md, docs/delivery.md "Sending",
/// docs/operations.md).
///
/// | variable | field | default |
/// | --- | --- | --- |
/// | `LIVERELAY_WORKER_ID` | `workerId` (lease owner of the dispatcher and the webhook worker; ≤ 200 characters, no control characters) | `<host>-<pid>-<random>` |
/// | `LIVERELAY_DISPATCH_THREADS` | `dispatchThreads` (1…512) | 4 |
/// | `LIVERELAY_DISPATCH_BATCH` | `dispatchBatch` (operations per claim / apply, 1…1000) | 512 |
/// | `LIVERELAY_DISPATCH_LEASE_SECONDS` | `dispatchLeaseSeconds` (3…3600) | 30 |
/// | `LIVERELAY_DISPATCH_MAX_IN_FLIGHT` | `dispatchMaxInFlight` (1…100,000) | 4096 |
/// | `LIVERELAY_DISPATCH_CONNECTIONS` | `dispatchConnections` (HTTP/2 connections per credential, 1…64) | 4 |
/// | `LIVERELAY_GC_INTERVAL_SECONDS` | `gcIntervalSeconds` (maintenance pass interval, ≥ 1) | 600 |
/// | `LIVERELAY_METRICS_LISTEN` | `metricsListen` (`host:port` of `/metrics`, `/healthz`, `/readyz`) | unset: none |
/// | `LIVERELAY_MIGRATIONS_DIR` | `migrationsDirectory` | `./Migrations`, then the build's repository |
public struct ProcessSettings: Sendable {
    public var workerId: String?
    public var dispatchThreads = 4
    public var dispatchBatch = 512
    public var dispatchLeaseSeconds = 30
    public var dispatchMaxInFlight = 4096
    public var dispatchConnections = 4
    public var gcIntervalSeconds: Double = 600
    public var metricsListen: (host: String, port: Int)?
    public var migrationsDirectory: String?

    public init() {}

    /// Reads every variable of the table above from `r`, recording problems in it.
    static func read(_ r: inout EnvironmentReader) -> ProcessSettings {
        var s = ProcessSettings()
        if let id = r.string("LIVERELAY_WORKER_ID") {
            if id.count <= 200, !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
                s.workerId = id
            } else {
                r.problem("LIVERELAY_WORKER_ID must be at most 200 characters without control characters")
            }
        }
        s.dispatchThreads = r.int("LIVERELAY_DISPATCH_THREADS", 4, 1...512)
        s.dispatchBatch = r.int("LIVERELAY_DISPATCH_BATCH", 512, 1...1000)
        s.dispatchLeaseSeconds = r.int("LIVERELAY_DISPATCH_LEASE_SECONDS", 30, 3...3600)
        s.dispatchMaxInFlight = r.int("LIVERELAY_DISPATCH_MAX_IN_FLIGHT", 4096, 1...100_000)
        s.dispatchConnections = r.int("LIVERELAY_DISPATCH_CONNECTIONS", 4, 1...64)
        s.gcIntervalSeconds = r.seconds("LIVERELAY_GC_INTERVAL_SECONDS", 600, minimum: 1)
        s.metricsListen = r.hostPort("LIVERELAY_METRICS_LISTEN", example: "127.0.0.1:9464")
        s.migrationsDirectory = r.string("LIVERELAY_MIGRATIONS_DIR")
        return s
    }
}
