import Foundation
import Delivery
import Logging
import LiveRelayCore
import LiveRelayStore
import Postgres

/// Every setting of a LiveRelay process, read from the environment in one place (docs/configuration.md)
/// and validated before anything starts.
///
/// | variable | field | default |
/// | --- | --- | --- |
/// | `DATABASE_URL` | `databaseURL` | nil → embedded cluster under `home` |
/// | `LIVERELAY_LISTEN` | `listenHost`/`listenPort` | `127.0.0.1:8080` |
/// | `LIVERELAY_KEK` | `kek` (32 bytes) | generated into `<home>/kek` in embedded mode; required otherwise |
/// | `LIVERELAY_APNS_PRODUCTION_URL` | `apnsProductionURL` | `https://api.push.apple.com` |
/// | `LIVERELAY_APNS_SANDBOX_URL` | `apnsSandboxURL` | `https://api.sandbox.push.apple.com` |
/// | `LIVERELAY_FCM_URL` | `fcmURL` | `https://fcm.googleapis.com` |
/// | `LIVERELAY_APNS_CHANNELS_SANDBOX_URL`, `…_PRODUCTION_URL` | `apnsChannelsSandboxURL`, `apnsChannelsProductionURL` | `https://api-manage-broadcast.sandbox.push.apple.com:2195`, `https://api-manage-broadcast.push.apple.com:2196` |
/// | `LIVERELAY_APNS_BROADCAST_SANDBOX_URL`, `…_PRODUCTION_URL` | `apnsBroadcastSandboxURL`, `apnsBroadcastProductionURL` | `https://api-broadcast.sandbox.push.apple.com`, `https://api-broadcast.push.apple.com` |
/// | `LIVERELAY_EXTRA_CA_FILE` | `extraCAFile` | none |
/// | `LIVERELAY_DEFAULT_EXPIRATION_SECONDS` | `defaultExpirationSeconds` | 3600 |
/// | `LIVERELAY_LOG_LEVEL` | `logLevel` | `info` |
/// | `LIVERELAY_HOME` | `home` (embedded cluster, KEK file) | `./.liverelay` |
/// | `LIVERELAY_HTTP_THREADS` | `httpThreads` | 16 |
/// | `LIVERELAY_DB_POOL_SIZE` | `databasePoolSize` | 20 |
/// | `LIVERELAY_ALLOW_PRIVILEGED_ROLE` | `allowPrivilegedRole` (`1`: run with a SUPERUSER/BYPASSRLS role) | unset |
/// | `LIVERELAY_MAX_INSTALLATIONS_PER_TENANT` | `limits.maxInstallationsPerTenant` | 1,000,000 |
/// | `LIVERELAY_MAX_LIVE_TARGETS_PER_TENANT` | `limits.maxLiveTargetsPerTenant` | 100,000 |
/// | `LIVERELAY_RETENTION_DAYS` | `retentionDays` (terminal targets and their operations) | 30 |
/// | `LIVERELAY_WEBHOOK_ALLOW_PRIVATE` | `webhookAllowPrivate` (`1`: webhooks may use `http://` and private addresses, docs/webhooks.md) | unset |
/// | `LIVERELAY_WEBHOOK_THREADS` | `webhookThreads` (webhook attempts in flight per process; `0`: this process delivers no webhooks) | 8 |
/// | dispatcher, maintenance, metrics listener, migrations directory | `process` | `ProcessSettings` |
/// | `LIVERELAY_PRIORITY10_HOURLY_BUDGET` | `priorityBudgets.priority10HourlyBudget` (0–1000, docs/priority-budget.md) | 40 |
/// | `LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET` | `priorityBudgets.frequentUpdatesHourlyBudget` (0–1000) | 240 |
public struct Configuration: Sendable {
    public var databaseURL: String?
    public var listenHost: String
    public var listenPort: Int
    /// Key-encryption key (AES-256), nil until resolved (embedded mode generates it).
    public var kek: [UInt8]?
    public var apnsProductionURL: String
    public var apnsSandboxURL: String
    public var fcmURL: String
    /// APNs channel management base URLs (docs/channels.md "APNs wire").
    public var apnsChannelsSandboxURL = "https://api-manage-broadcast.sandbox.push.apple.com:2195"
    public var apnsChannelsProductionURL = "https://api-manage-broadcast.push.apple.com:2196"
    /// APNs broadcast base URLs (docs/channels.md "APNs wire").
    public var apnsBroadcastSandboxURL = "https://api-broadcast.sandbox.push.apple.com"
    public var apnsBroadcastProductionURL = "https://api-broadcast.push.apple.com"
    public var extraCAFile: String?
    /// Seconds added to now for `apns-expiration` when a write has no `expires_at` (docs/providers.md).
    public var defaultExpirationSeconds: Int
    public var logLevel: LogLevel
    /// Directory for the embedded cluster and generated KEK.
    public var home: URL
    public var httpThreads: Int
    public var databasePoolSize: Int
    /// `LIVERELAY_ALLOW_PRIVILEGED_ROLE=1`: start even when the database role is SUPERUSER or
    /// BYPASSRLS (row-level security then does not apply; docs/security.md "Database").
    public var allowPrivilegedRole = false
    /// Per-tenant row caps (docs/security.md "Per-tenant caps").
    public var limits = TenantLimits()
    /// Days a terminal target and its operations are kept before maintenance purges them
    /// (docs/security.md "Retention").
    public var retentionDays = TenantLimits.defaultRetentionDays
    /// Webhook URLs may be `http://` and resolve to loopback/private addresses.
    public var webhookAllowPrivate: Bool = false
    /// Webhook sender threads per process (0: no webhook worker).
    public var webhookThreads: Int = 8
    /// Dispatcher, maintenance, metrics-listener and migrations settings (`ProcessSettings`).
    public var process = ProcessSettings()
    /// Default priority-10 budgets of tenants that set none (docs/priority-budget.md).
    public var priorityBudgets = PriorityBudget.Defaults.standard

    /// The `Database` of this process: every transaction carries the default budgets, which
    /// SQL-built event objects read (`PriorityBudgetSQL.settings`).
    public func database(_ pool: PostgresPool) -> Database {
        Database(pool: pool, settings: PriorityBudgetSQL.settings(priorityBudgets))
    }

    /// Reads and validates `env`. Throws `ConfigurationError` listing every problem, one per line.
    public static func load(_ env: [String: String] = ProcessInfo.processInfo.environment) throws -> Configuration {
        var problems: [String] = []
        func nonEmpty(_ k: String) -> String? { env[k].flatMap { $0.isEmpty ? nil : $0 } }

        let listen = nonEmpty("LIVERELAY_LISTEN") ?? "127.0.0.1:8080"
        var host = "127.0.0.1", port = 8080
        if let colon = listen.lastIndex(of: ":"), let p = Int(listen[listen.index(after: colon)...]), (0...65535).contains(p) {
            host = String(listen[..<colon])
            if host.isEmpty { host = "0.0.0.0" }
            port = p
        } else {
            problems.append("LIVERELAY_LISTEN must be host:port (e.g. 127.0.0.1:8080), got \(listen.debugDescription)")
        }

        var kek: [UInt8]?
        if let k = nonEmpty("LIVERELAY_KEK") {
            if let d = Data(base64Encoded: k), d.count == 32 {
                kek = Array(d)
            } else {
                problems.append("LIVERELAY_KEK must be the base64 of exactly 32 random bytes (e.g. `openssl rand -base64 32`)")
            }
        }
        let db = nonEmpty("DATABASE_URL")
        if db != nil && kek == nil && !problems.contains(where: { $0.hasPrefix("LIVERELAY_KEK") }) {
            problems.append("LIVERELAY_KEK is required when DATABASE_URL is set (base64 of 32 random bytes)")
        }

        func url(_ k: String, _ def: String) -> String {
            let v = nonEmpty(k) ?? def
            if !(v.hasPrefix("https://") || v.hasPrefix("http://")) || URL(string: v)?.host == nil {
                problems.append("\(k) must be an http(s) URL, got \(v.debugDescription)")
            }
            return v.hasSuffix("/") ? String(v.dropLast()) : v
        }
        let apnsProd = url("LIVERELAY_APNS_PRODUCTION_URL", "https://api.push.apple.com")
        let apnsSandbox = url("LIVERELAY_APNS_SANDBOX_URL", "https://api.sandbox.push.apple.com")
        let fcm = url("LIVERELAY_FCM_URL", "https://fcm.googleapis.com")
        let channelsSandbox = url("LIVERELAY_APNS_CHANNELS_SANDBOX_URL", "https://api-manage-broadcast.sandbox.push.apple.com:2195")
        let channelsProd = url("LIVERELAY_APNS_CHANNELS_PRODUCTION_URL", "https://api-manage-broadcast.push.apple.com:2196")
        let broadcastSandbox = url("LIVERELAY_APNS_BROADCAST_SANDBOX_URL", "https://api-broadcast.sandbox.push.apple.com")
        let broadcastProd = url("LIVERELAY_APNS_BROADCAST_PRODUCTION_URL", "https://api-broadcast.push.apple.com")

        let ca = nonEmpty("LIVERELAY_EXTRA_CA_FILE")
        if let ca, !FileManager.default.isReadableFile(atPath: ca) {
            problems.append("LIVERELAY_EXTRA_CA_FILE \(ca) is not a readable file")
        }

        func int(_ k: String, _ def: Int, _ range: ClosedRange<Int>) -> Int {
            guard let s = nonEmpty(k) else { return def }
            guard let v = Int(s), range.contains(v) else {
                problems.append("\(k) must be an integer in \(range.lowerBound)...\(range.upperBound), got \(s.debugDescription)")
                return def
            }
            return v
        }
        let exp = int("LIVERELAY_DEFAULT_EXPIRATION_SECONDS", 3600, 0...2_592_000)
        let threads = int("LIVERELAY_HTTP_THREADS", 16, 1...256)
        let poolSize = int("LIVERELAY_DB_POOL_SIZE", 20, 1...500)
        let webhookThreads = int("LIVERELAY_WEBHOOK_THREADS", 8, 0...256)
        var allowPrivate = false
        if let v = nonEmpty("LIVERELAY_WEBHOOK_ALLOW_PRIVATE") {
            if v == "1" {
                allowPrivate = true
            } else if v != "0" {
                problems.append("LIVERELAY_WEBHOOK_ALLOW_PRIVATE must be 1 (or unset), got \(v.debugDescription)")
            }
        }

        var level = LogLevel.info
        if let l = nonEmpty("LIVERELAY_LOG_LEVEL") {
            if let v = LogLevel(name: l) {
                level = v
            } else {
                problems.append("LIVERELAY_LOG_LEVEL must be one of debug, info, warning, error, got \(l.debugDescription)")
            }
        }
        let home = URL(
            fileURLWithPath: nonEmpty("LIVERELAY_HOME") ?? ".liverelay",
            relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        ).standardizedFileURL

        let maxInstallations = int("LIVERELAY_MAX_INSTALLATIONS_PER_TENANT", TenantLimits.defaultMaxInstallations, 1...1_000_000_000)
        let maxLiveTargets = int("LIVERELAY_MAX_LIVE_TARGETS_PER_TENANT", TenantLimits.defaultMaxLiveTargets, 1...1_000_000_000)
        let retentionDays = int("LIVERELAY_RETENTION_DAYS", TenantLimits.defaultRetentionDays, 1...3650)
        let allowPrivileged = env["LIVERELAY_ALLOW_PRIVILEGED_ROLE"] == "1"
        var reader = EnvironmentReader(env)
        let process = ProcessSettings.read(&reader)
        problems += reader.problems
        let budgets = PriorityBudget.Defaults(
            priority10HourlyBudget: int(
                "LIVERELAY_PRIORITY10_HOURLY_BUDGET", PriorityBudget.Defaults.standard.priority10HourlyBudget,
                0...PriorityBudget.maxBudget),
            frequentUpdatesHourlyBudget: int(
                "LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET", PriorityBudget.Defaults.standard.frequentUpdatesHourlyBudget,
                0...PriorityBudget.maxBudget))

        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
        var config = Configuration(
            databaseURL: db, listenHost: host, listenPort: port, kek: kek, apnsProductionURL: apnsProd,
            apnsSandboxURL: apnsSandbox, fcmURL: fcm, extraCAFile: ca, defaultExpirationSeconds: exp,
            logLevel: level, home: home, httpThreads: threads, databasePoolSize: poolSize)
        config.allowPrivilegedRole = allowPrivileged
        config.apnsChannelsSandboxURL = channelsSandbox; config.apnsChannelsProductionURL = channelsProd
        config.apnsBroadcastSandboxURL = broadcastSandbox; config.apnsBroadcastProductionURL = broadcastProd
        config.limits = TenantLimits(maxInstallationsPerTenant: maxInstallations, maxLiveTargetsPerTenant: maxLiveTargets)
        config.retentionDays = retentionDays
        config.webhookAllowPrivate = allowPrivate
        config.webhookThreads = webhookThreads
        config.process = process
        config.priorityBudgets = budgets
        return config
    }
}

extension Configuration {
    /// The provider URLs, extra CA and connections per pool as `ProviderEndpoints` (every URL was
    /// validated by `load`).
    public func providerEndpoints(maxConnectionsPerPool: Int = 4) -> ProviderEndpoints {
        var e = ProviderEndpoints(
            apnsProductionURL: URL(string: apnsProductionURL)!, apnsSandboxURL: URL(string: apnsSandboxURL)!,
            fcmURL: URL(string: fcmURL)!, extraCAFile: extraCAFile, maxConnectionsPerPool: maxConnectionsPerPool)
        e.apnsChannelsSandboxURL = URL(string: apnsChannelsSandboxURL)!
        e.apnsChannelsProductionURL = URL(string: apnsChannelsProductionURL)!
        e.apnsBroadcastSandboxURL = URL(string: apnsBroadcastSandboxURL)!
        e.apnsBroadcastProductionURL = URL(string: apnsBroadcastProductionURL)!
        return e
    }
}

/// Invalid configuration: each entry of `problems` is one line naming the variable.
public struct ConfigurationError: Error, CustomStringConvertible {
    public let problems: [String]
    public var description: String { problems.map { "configuration: \($0)" }.joined(separator: "\n") }
}
