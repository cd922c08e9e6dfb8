import Foundation
import Logging

/// A private PostgreSQL cluster under `<home>/postgres` for running LiveRelay with nothing
/// configured (SPEC §9: "with no DATABASE_URL, serve runs an embedded PostgreSQL cluster under
/// ./.liverelay/ (initdb + pg_ctl on a unix socket)").
///
/// Layout: `<home>/postgres/data` (cluster), `<home>/postgres/run` (unix socket, no TCP),
/// `<home>/postgres/postgres.log`. As root the cluster runs as the unprivileged `postgres`
/// user (initdb refuses root). The service connects as role `liverelay`, which is neither
/// superuser nor BYPASSRLS, so row-level security applies to it.
public final class EmbeddedPostgres: @unchecked Sendable {  // immutable after init but for `startedHere`, set once by start()
    public let root: URL
    let log: Logger
    /// True when `start()` started the server (so `stop()` should stop it).
    public private(set) var startedHere = false

    /// - Parameter home: the LiveRelay home directory (`./.liverelay` by default).
    public init(home: URL, log: Logger) {
        self.root = home.appendingPathComponent("postgres")
        self.log = log
    }

    var dataDir: String { root.appendingPathComponent("data").path }
    var socketDir: String { root.appendingPathComponent("run").path }

    /// libpq connection string for the `liverelay` role.
    public var conninfo: String { "host='\(socketDir)' dbname=liverelay user=liverelay" }

    /// Initialises the cluster on first use, starts it unless already running, and makes
    /// sure the `liverelay` role and database exist. Throws `EmbeddedPostgresError` with the
    /// failing step and the server's own message.
    public func start() throws {
        let bin = try Self.binDir()
        let fm = FileManager.default
        let isRoot = getuid() == 0
        guard (socketDir + "/.s.PGSQL.5432").utf8.count < 108 else {
            throw EmbeddedPostgresError("the path \(socketDir) is too long for a unix socket; set LIVERELAY_HOME to a shorter directory")
        }
        try fm.createDirectory(atPath: socketDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try fm.createDirectory(atPath: dataDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if isRoot {
            try run(["/bin/chown", "-R", "postgres:postgres", root.path], as: false, step: "chown")
            do { try run(["/usr/bin/test", "-w", dataDir], as: true, step: "access check") } catch {
                throw EmbeddedPostgresError("user postgres cannot reach \(root.path) (a parent directory is not traversable); set LIVERELAY_HOME to a directory it can reach, e.g. /var/lib/liverelay")
            }
        }
        if !fm.fileExists(atPath: dataDir + "/PG_VERSION") {
            log.info("initialising embedded PostgreSQL", ["dir": .string(dataDir)])
            try run([bin + "/initdb", "-D", dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8"], as: isRoot, step: "initdb")
        }
        if (try? run([bin + "/pg_ctl", "-D", dataDir, "status"], as: isRoot, step: "status")) == nil {
            try run([bin + "/pg_ctl", "-D", dataDir, "-l", root.appendingPathComponent("postgres.log").path, "-w", "-t", "60",
                     "-o", "-k \(socketDir) -c listen_addresses='' -c max_connections=200", "start"], as: isRoot, step: "pg_ctl start")
            startedHere = true
            log.info("embedded PostgreSQL started", ["socket_dir": .string(socketDir)])
        } else {
            log.info("embedded PostgreSQL already running", ["socket_dir": .string(socketDir)])
        }
        let psql = [bin + "/psql", "-X", "-q", "-h", socketDir, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1"]
        try run(psql + ["-c", "DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='liverelay') THEN CREATE ROLE liverelay LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END$$;"], as: isRoot, step: "create role")
        let exists = try run(psql + ["-tAc", "SELECT 1 FROM pg_database WHERE datname='liverelay'"], as: isRoot, step: "check database")
        if !exists.contains("1") {
            try run(psql + ["-c", "CREATE DATABASE liverelay OWNER liverelay"], as: isRoot, step: "create database")
        }
    }

    /// Stops the cluster (fast shutdown) if this process started it.
    public func stop() {
        guard startedHere, let bin = try? Self.binDir() else { return }
        _ = try? run([bin + "/pg_ctl", "-D", dataDir, "-m", "fast", "-w", "stop"], as: getuid() == 0, step: "pg_ctl stop")
        startedHere = false
        log.info("embedded PostgreSQL stopped")
    }

    /// The PostgreSQL server binaries directory (newest `/usr/lib/postgresql/*/bin`).
    static func binDir() throws -> String {
        let base = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
        guard let v = versions.compactMap({ Int($0) }).max(), FileManager.default.isExecutableFile(atPath: "\(base)/\(v)/bin/initdb") else {
            throw EmbeddedPostgresError("PostgreSQL server is not installed (apt-get install postgresql), or set DATABASE_URL")
        }
        return "\(base)/\(v)/bin"
    }

    @discardableResult
    func run(_ argv: [String], as postgresUser: Bool, step: String) throws -> String {
        let full = postgresUser ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + argv : argv
        let (status, text) = try Subprocess.run(full)
        guard status == 0 else {
            throw EmbeddedPostgresError("\(step) failed: \(text.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        return text
    }
}

/// A failure to set up or start the embedded cluster; `message` says which step and why.
public struct EmbeddedPostgresError: Error, CustomStringConvertible {
    public let message: String
    public init(_ m: String) { message = m }
    public var description: String { "embedded PostgreSQL: \(message)" }
}
