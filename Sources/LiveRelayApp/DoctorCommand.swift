import Foundation
import Crypto
import Delivery
import LiveRelayStore
import Logging
import Postgres

/// `liverelay doctor`: checks a deployment the way an operator would before (or while) running
/// it, one line per check (`ok`, `warn` or `FAIL`, the check's name, what was found), then a
/// summary line; exit status 1 when any check failed, 2 for a usage error, else 0. Reads the
/// same environment as `serve` (without `DATABASE_URL`: the embedded cluster of the current
/// directory, started for the check and stopped after it when it was not running). Changes
/// nothing: it applies no migration and writes no row (in embedded mode a missing KEK file is
/// generated, as `serve` would).
///
/// Checks, in order (docs/operations.md "liverelay doctor"):
/// 1. `configuration`: every variable parses (the same rules as `serve` and `worker`);
/// 2. `database`: PostgreSQL answers;
/// 3. `database role`: the role is neither SUPERUSER nor BYPASSRLS (row-level security applies);
/// 4. `migrations`: every file of the Migrations directory is applied and unmodified;
/// 5. `clock`: the local clock is within `--max-clock-skew` seconds (default 2) of the
///    database's (APNs provider tokens, leases and expiry use both);
/// 6. `kek`: every stored provider key opens with this KEK;
/// 7. `tenant <id> apns <environment>` / `tenant <id> fcm`: a provider token (APNs ES256 JWT) or
///    OAuth assertion (FCM RS256 JWT) can be minted with the stored key; a tenant with no
///    credential is a warning;
/// 8. with `--reachability`: an HTTP/2 + TLS connection to each configured APNs host in use and
///    to the FCM host, and an OAuth access token from each service account's `token_uri`.
enum DoctorCommand {
    static let usage = """
        usage: liverelay doctor [--reachability] [--tenant ID] [--max-clock-skew SECONDS]

        Checks the configuration, the database (reachable; role neither SUPERUSER nor BYPASSRLS;
        migrations current), the clock against the database, the key-encryption key (every stored
        provider key opens) and each tenant's provider credentials (an APNs provider token / an FCM
        OAuth assertion can be minted). One line per check: ok, warn or FAIL. Changes nothing.

          --reachability           also connect to the configured APNs/FCM hosts and fetch an OAuth
                                   access token from each FCM service account's token_uri
          --tenant ID              check only this tenant's credentials
          --max-clock-skew S       clock difference allowed against the database (default 2 seconds)

        Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 usage error.
        """

    /// The outcome of one check.
    enum Status: String {
        case ok = "ok"
        case warn = "warn"
        case fail = "FAIL"
    }

    /// Prints each line as it is decided, and counts.
    final class Report {
        private(set) var counts: [Status: Int] = [:]
        let emit: (String) -> Void
        init(emit: @escaping (String) -> Void) { self.emit = emit }
        func add(_ s: Status, _ check: String, _ detail: String) {
            counts[s, default: 0] += 1
            emit("\(s.rawValue.padding(toLength: 4, withPad: " ", startingAt: 0)) \(check): \(detail)")
        }
        var failed: Int { counts[.fail] ?? 0 }
        var summary: String {
            "doctor: \(counts[.ok] ?? 0) ok, \(counts[.warn] ?? 0) warnings, \(failed) failed"
        }
    }

    /// Runs the checks for the command line `args` (after `doctor`); returns the exit status.
    static func main(
        _ args: [String], env: [String: String] = ProcessInfo.processInfo.environment,
        emit: @escaping (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
    ) -> Int32 {
        var reachability = false
        var onlyTenant: String?
        var maxSkew = 2.0
        var i = 0
        while i < args.count {
            let a = args[i]
            func value() -> String? { i + 1 < args.count ? args[i + 1] : nil }
            switch a {
            case "--reachability": reachability = true
            case "--tenant":
                guard let v = value(), !v.isEmpty else { return usageError("--tenant needs a tenant id") }
                onlyTenant = v; i += 1
            case "--max-clock-skew":
                guard let v = value().flatMap(Double.init), v > 0, v.isFinite else {
                    return usageError("--max-clock-skew needs a positive number of seconds")
                }
                maxSkew = v; i += 1
            default:
                return usageError("unknown option \(a.debugDescription)")
            }
            i += 1
        }
        let report = Report(emit: emit)
        run(report, env: env, reachability: reachability, onlyTenant: onlyTenant, maxSkew: maxSkew)
        emit(report.summary)
        return report.failed > 0 ? 1 : 0
    }

    static func usageError(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("liverelay doctor: \(message)\nsee `liverelay doctor --help`\n".utf8))
        return 2
    }

    static func run(_ report: Report, env: [String: String], reachability: Bool, onlyTenant: String?, maxSkew: Double) {
        // 1. configuration
        let config: Configuration
        do {
            config = try Configuration.load(env)  // every variable, the worker's too (ProcessSettings)
        } catch let e as ConfigurationError {
            for p in e.problems { report.add(.fail, "configuration", p) }
            return
        } catch {
            report.add(.fail, "configuration", "\(error)")
            return
        }
        let database = config.databaseURL == nil ? "embedded cluster under \(config.home.path)" : "DATABASE_URL"
        report.add(
            .ok, "configuration",
            "database \(database); API \(config.listenHost):\(config.listenPort); "
                + "APNs \(config.apnsProductionURL) / \(config.apnsSandboxURL); FCM \(config.fcmURL)")

        // 2. database (doctor creates nothing: no new embedded cluster, no new KEK file)
        let log = Logger(minimum: .error, sink: { _ in })
        var runtimeConfig = config
        var kekSource = config.kek != nil ? "LIVERELAY_KEK" : config.home.appendingPathComponent("kek").path
        if config.databaseURL == nil {
            // The cluster lives under the home, or — when the cluster's user cannot reach the home
            // (a clone under /root) — in its relocated directory (docs/security.md).
            let candidates = [config.home.appendingPathComponent("postgres"), EmbeddedPostgres.relocatedRoot(for: config.home)]
            guard candidates.contains(where: { FileManager.default.fileExists(atPath: $0.appendingPathComponent("data/PG_VERSION").path) }) else {
                report.add(
                    .fail, "database",
                    "no DATABASE_URL and no embedded cluster under \(config.home.path)/postgres "
                        + "(start one with deploy/local/run or liverelay serve, or set DATABASE_URL)")
                return
            }
            if config.kek == nil && !FileManager.default.fileExists(atPath: kekSource) {
                runtimeConfig.kek = SecureRandom.bytes(32)  // in memory only: stored keys will not open
                kekSource = "nowhere (no LIVERELAY_KEK and no \(kekSource))"
            }
        }
        let rt: Runtime
        do { rt = try Runtime(config: runtimeConfig, log: log) } catch {
            report.add(.fail, "database", "\(error)")
            return
        }
        defer { rt.shutdown() }
        let pool = PostgresPool(conninfo: rt.conninfo, maxConnections: 2, acquireTimeoutSeconds: 10)
        defer { pool.close() }
        let role: DatabaseRole
        do {
            let (version, r) = try pool.withConnection { c in (try DoctorStore.serverVersion(c), try DoctorStore.role(c)) }
            role = r
            report.add(.ok, "database", "PostgreSQL \(version.split(separator: " ").first.map(String.init) ?? version) answers as role \(r.name)")
        } catch {
            report.add(.fail, "database", "cannot connect or query: \(error)")
            return
        }

        // 3. role
        var powers: [String] = []
        if role.superuser { powers.append("SUPERUSER") }
        if role.bypassRLS { powers.append("BYPASSRLS") }
        if powers.isEmpty {
            report.add(.ok, "database role", "\(role.name) is neither SUPERUSER nor BYPASSRLS: row-level security applies")
        } else {
            report.add(
                .fail, "database role",
                "\(role.name) has \(powers.joined(separator: " and ")): row-level security does not apply to it; "
                    + "connect as a role created with NOSUPERUSER NOBYPASSRLS (docs/operations.md)")
        }

        // 4. migrations
        let total = rt.migrator.migrations.count
        do {
            let pending = try rt.migrator.pending(pool: pool)
            if pending.isEmpty {
                report.add(.ok, "migrations", "all \(total) applied")
            } else {
                report.add(.fail, "migrations", "\(pending.count) of \(total) pending (\(pending.joined(separator: ", "))): run `liverelay migrate`")
            }
        } catch {
            report.add(.fail, "migrations", "\(error)")
        }

        // 5. clock
        do {
            let before = Date().timeIntervalSince1970
            let server = try pool.withConnection { c in try DoctorStore.serverClock(c) }
            let after = Date().timeIntervalSince1970
            let skew = server - (before + after) / 2
            let text = String(format: "%+.3f s against the database (round trip %.3f s, limit %.1f s)", skew, after - before, maxSkew)
            report.add(abs(skew) <= maxSkew ? .ok : .fail, "clock", abs(skew) <= maxSkew ? text : text + "; synchronise this host's clock (NTP)")
        } catch {
            report.add(.fail, "clock", "cannot read the database clock: \(error)")
        }

        // 6–7. KEK and provider credentials
        let tenants: [String]
        do {
            let all = try Database(pool: pool).system { c in try DoctorStore.tenantIds(c) }
            if let onlyTenant {
                guard all.contains(onlyTenant) else {
                    report.add(.fail, "tenant \(onlyTenant)", "no such tenant")
                    return
                }
                tenants = [onlyTenant]
            } else {
                tenants = all
            }
        } catch {
            report.add(.fail, "tenants", "cannot list tenants: \(error)")
            return
        }
        let source: DatabaseProviderCredentialSource
        do {
            source = DatabaseProviderCredentialSource(db: Database(pool: pool), kek: try AESGCM(key: rt.kek), log: log)
        } catch {
            report.add(.fail, "kek", "the key-encryption key from \(kekSource) is unusable: \(error)")
            return
        }
        var loaded: [(String, TenantProviderCredentials)] = []
        for t in tenants {
            do { loaded.append((t, try source.credentials(tenantId: t))) } catch {
                report.add(.fail, "tenant \(t)", "cannot read its provider credentials: \(error)")
            }
        }
        let usable = loaded.reduce(0) { $0 + $1.1.apns.count + ($1.1.fcm == nil ? 0 : 1) }
        let unopened = loaded.reduce(0) { $0 + $1.1.unusable.count }
        if unopened == 0 && kekSource.hasPrefix("nowhere") {
            report.add(.warn, "kek", "no key-encryption key yet (\(kekSource)); `liverelay serve` generates one on its first start")
        } else if unopened == 0 {
            report.add(.ok, "kek", "32 bytes from \(kekSource); opens all \(usable) stored provider key(s) of \(loaded.count) tenant(s)")
        } else {
            report.add(
                .fail, "kek",
                "\(unopened) of \(usable + unopened) stored provider keys do not open with the key from \(kekSource) "
                    + "(a different LIVERELAY_KEK than the one they were stored with?)")
        }
        let endpoints = ProviderEndpoints(
            apnsProductionURL: URL(string: config.apnsProductionURL)!,
            apnsSandboxURL: URL(string: config.apnsSandboxURL)!, fcmURL: URL(string: config.fcmURL)!,
            extraCAFile: config.extraCAFile, connectTimeoutSeconds: 5, requestTimeoutSeconds: 10)
        var environmentsInUse: Set<String> = []
        var fcmInUse = false
        for (t, creds) in loaded {
            if creds.apns.isEmpty && creds.fcm == nil && creds.unusable.isEmpty {
                report.add(.warn, "tenant \(t)", "no provider credentials configured (its pushes fail with PROVIDER_CREDENTIALS_INVALID)")
                continue
            }
            for (name, reason) in creds.unusable.sorted(by: { $0.key < $1.key }) {
                report.add(.fail, "tenant \(t) \(name.replacingOccurrences(of: "_", with: " "))", reason)
            }
            for env in creds.apns.keys.sorted(by: >) {
                let c = creds.apns[env]!
                environmentsInUse.insert(env)
                do {
                    _ = try ProviderProbe.mintAPNsToken(c)
                    report.add(
                        .ok, "tenant \(t) apns \(env)",
                        "provider token minted (team \(c.teamId), key \(c.keyId), "
                            + "topics \(c.topics.joined(separator: ",")), \(c.fingerprint))")
                } catch {
                    report.add(.fail, "tenant \(t) apns \(env)", "cannot sign a provider token with the stored key: \(error)")
                }
            }
            if let f = creds.fcm {
                fcmInUse = true
                do {
                    _ = try ProviderProbe.mintFCMAssertion(f)
                    var detail = "OAuth assertion minted (project \(f.projectId), \(f.clientEmail), \(f.fingerprint))"
                    if reachability {
                        do {
                            _ = try ProviderProbe.fcmAccessToken(f, endpoints: endpoints)
                            detail += "; access token obtained from \(f.tokenURI)"
                        } catch {
                            report.add(.fail, "tenant \(t) fcm", "assertion minted, but no access token: \(error)")
                            continue
                        }
                    }
                    report.add(.ok, "tenant \(t) fcm", detail)
                } catch {
                    report.add(.fail, "tenant \(t) fcm", "cannot sign an OAuth assertion with the stored key: \(error)")
                }
            }
        }
        if tenants.isEmpty { report.add(.warn, "tenants", "none yet (`liverelay admin tenants create --name …`)") }

        // 8. reachability
        guard reachability else { return }
        var hosts: [(String, URL)] = []
        if environmentsInUse.contains("production") { hosts.append(("apns production", endpoints.apnsProductionURL)) }
        if environmentsInUse.contains("sandbox") { hosts.append(("apns sandbox", endpoints.apnsSandboxURL)) }
        if fcmInUse { hosts.append(("fcm", endpoints.fcmURL)) }
        if hosts.isEmpty { report.add(.warn, "reachability", "no provider host in use by the checked tenants") }
        for (name, url) in hosts {
            do {
                let s = try ProviderProbe.connect(url, endpoints: endpoints)
                report.add(.ok, "reachability \(name)", "\(url.absoluteString): HTTP/2 over TLS in \(String(format: "%.3f", s)) s")
            } catch {
                report.add(.fail, "reachability \(name)", "\(error)")
            }
        }
    }
}
