import Foundation
import Crypto
import Logging

/// A private PostgreSQL cluster under `<home>/postgres` for running LiveRelay with nothing
/// configured (docs/configuration.md: "with no DATABASE_URL, serve runs an embedded PostgreSQL cluster under
/// ./.liverelay/ (initdb + pg_ctl on a unix socket)").
///
/// Layout: `<root>/data` (cluster), `<root>/run` (unix socket, no TCP), `<root>/postgres.log`,
/// where `<root>` is `<home>/postgres` — or, when the cluster's user cannot reach the home
/// (root working in a clone under `/root`, mode 0700), `/var/lib/liverelay/<hash of the
/// home>/postgres`, owned by that user, announced in one log line. As root the cluster runs as
/// the unprivileged `postgres` user (initdb refuses root).
///
/// No other local user can connect (docs/security.md "Embedded PostgreSQL"): the socket
/// directory is 0700 and owned by the cluster's user, `unix_socket_permissions = 0700`, and
/// `pg_hba.conf` has one line, `local all all peer map=liverelay`: peer authentication through
/// `pg_ident.conf`, which maps only the cluster's OS user and the OS user running LiveRelay to
/// the roles `postgres` and `liverelay` (no `trust`, no TCP). Both files are rewritten on every
/// start, so clusters made by older versions (`initdb -A trust`) are closed too. The service
/// connects as role `liverelay`, which is neither superuser nor BYPASSRLS, so row-level
/// security applies to it.
public final class EmbeddedPostgres: @unchecked Sendable {  // `root`/`startedHere` are set by start() before any other use
    /// The LiveRelay home (`./.liverelay` by default).
    public let home: URL
    /// Where the cluster lives: `<home>/postgres`, or the relocated directory (see the type).
    public private(set) var root: URL
    let log: Logger
    /// True when `start()` started the server (so `stop()` should stop it).
    public private(set) var startedHere = false
    /// Parent of relocated clusters.
    public static let relocationBase = "/var/lib/liverelay"

    /// - Parameter home: the LiveRelay home directory (`./.liverelay` by default).
    public init(home: URL, log: Logger) {
        self.home = home
        self.root = home.appendingPathComponent("postgres")
        self.log = log
    }

    var dataDir: String { root.appendingPathComponent("data").path }
    var socketDir: String { root.appendingPathComponent("run").path }
    var isRoot: Bool { getuid() == 0 }
    /// The OS user the cluster runs as.
    var clusterUser: String { isRoot ? "postgres" : Self.currentUserName() }

    /// libpq connection string for the `liverelay` role.
    public var conninfo: String { "host='\(socketDir)' dbname=liverelay user=liverelay" }

    /// The relocated root for `home`: `/var/lib/liverelay/<first 16 hex digits of SHA-256 of
    /// the home's path>/postgres`, one per working directory.
    public static func relocatedRoot(for home: URL) -> URL {
        let hash = Digest.sha256Hex(Array(home.standardizedFileURL.path.utf8)).prefix(16)
        return URL(fileURLWithPath: relocationBase).appendingPathComponent(String(hash)).appendingPathComponent("postgres")
    }

    /// Initialises the cluster on first use, starts it unless already running, and makes
    /// sure the `liverelay` role and database exist. Throws `EmbeddedPostgresError` with the
    /// failing step and the server's own message.
    public func start() throws {
        let bin = try Self.binDir()
        let fm = FileManager.default
        if isRoot {
            try fm.createDirectory(at: home, withIntermediateDirectories: true)
            if (try? run(["/usr/bin/test", "-x", home.path], as: true, step: "access check")) == nil {
                root = Self.relocatedRoot(for: home)
                // The base and the per-directory folder stay root-owned and traversable (0755);
                // the cluster's own folder below them belongs to postgres (chown below).
                let folder = root.deletingLastPathComponent()
                try fm.createDirectory(atPath: Self.relocationBase, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
                try fm.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
                chmod(Self.relocationBase, 0o755)
                chmod(folder.path, 0o755)
                try? Data((home.path + "\n").utf8).write(to: root.deletingLastPathComponent().appendingPathComponent("home"))
                log.info("embedded PostgreSQL lives in \(root.path): user postgres cannot reach \(home.path)")
            }
        }
        guard (socketDir + "/.s.PGSQL.5432").utf8.count < 108 else {
            throw EmbeddedPostgresError("the path \(socketDir) is too long for a unix socket; set LIVERELAY_HOME to a shorter directory")
        }
        try fm.createDirectory(atPath: root.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try fm.createDirectory(atPath: socketDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try fm.createDirectory(atPath: dataDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for dir in [root.path, socketDir, dataDir] { chmod(dir, 0o700) }
        if isRoot {
            try run(["/bin/chown", "-R", "postgres:postgres", root.path], as: false, step: "chown")
            do { try run(["/usr/bin/test", "-w", dataDir], as: true, step: "access check") } catch {
                throw EmbeddedPostgresError(
                    "user postgres cannot reach \(root.path) (a parent directory is not traversable); set LIVERELAY_HOME to a directory it can reach, e.g. /var/lib/liverelay"
                )
            }
        }
        if !fm.fileExists(atPath: dataDir + "/PG_VERSION") {
            log.info("initialising embedded PostgreSQL", ["dir": .string(dataDir)])
            try run(
                [
                    bin + "/initdb", "-D", dataDir, "-U", "postgres", "--auth-local=peer", "--auth-host=reject", "-E", "UTF8",
                    "--locale=C.UTF-8"
                ], as: isRoot, step: "initdb")
        }
        try writeAuthentication()
        let running = (try? run([bin + "/pg_ctl", "-D", dataDir, "status"], as: isRoot, step: "status")) != nil
        if !running {
            try run(
                [
                    bin + "/pg_ctl", "-D", dataDir, "-l", root.appendingPathComponent("postgres.log").path, "-w", "-t", "60",
                    "-o",
                    "-k \(socketDir) -c listen_addresses='' -c unix_socket_permissions=0700 -c max_connections=200"
                        + " -c wal_compression=\(Self.walCompression(bin: bin))",
                    "start"
                ],
                as: isRoot, step: "pg_ctl start")
            startedHere = true
            log.info("embedded PostgreSQL started", ["socket_dir": .string(socketDir)])
        } else {
            // A server started by an older version may still trust everyone: load the new rules.
            try run([bin + "/pg_ctl", "-D", dataDir, "reload"], as: isRoot, step: "pg_ctl reload")
            log.info("embedded PostgreSQL already running", ["socket_dir": .string(socketDir)])
        }
        let psql = [bin + "/psql", "-X", "-q", "-h", socketDir, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1"]
        try run(
            psql + [
                "-c",
                "DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='liverelay') THEN CREATE ROLE liverelay LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END$$;"
            ], as: isRoot, step: "create role")
        let exists = try run(psql + ["-tAc", "SELECT 1 FROM pg_database WHERE datname='liverelay'"], as: isRoot, step: "check database")
        if !exists.contains("1") {
            try run(psql + ["-c", "CREATE DATABASE liverelay OWNER liverelay"], as: isRoot, step: "create database")
        }
    }

    /// Writes `pg_hba.conf` (peer through map `liverelay` on the unix socket, nothing else) and
    /// `pg_ident.conf` (the cluster's user and this process's user → `postgres`, `liverelay`).
    func writeAuthentication() throws {
        let me = Self.currentUserName()
        let hba = """
            # Written by LiveRelay on every start (docs/security.md "Embedded PostgreSQL"):
            # unix socket only, peer authentication through the map below, no trust.
            local all all peer map=liverelay

            """
        var users = [clusterUser]
        if !users.contains(me) { users.append(me) }
        let ident =
            "# Written by LiveRelay on every start: OS users allowed in, and as which roles.\n"
            + users.flatMap { u in ["liverelay \(u) postgres", "liverelay \(u) liverelay"] }.joined(separator: "\n") + "\n"
        for (name, text) in [("pg_hba.conf", hba), ("pg_ident.conf", ident)] {
            let path = dataDir + "/" + name
            guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
                throw EmbeddedPostgresError("cannot write \(path)")
            }
            if isRoot { try run(["/bin/chown", "postgres:postgres", path], as: false, step: "chown \(name)") }
        }
    }

    /// The name of the effective OS user (`getpwuid(geteuid())`), `root` when unknown.
    static func currentUserName() -> String {
        guard let pw = getpwuid(geteuid()), let name = pw.pointee.pw_name else { return "root" }
        return String(cString: name)
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

    /// The `wal_compression` method the cluster starts with: `lz4` when the server was built
    /// with LZ4 (`pg_config --configure` lists `--with-lz4`, as Debian's PostgreSQL 15 does),
    /// else `pglz`, which every server has. It compresses the full-page images PostgreSQL writes
    /// to WAL at the first change of a page after each checkpoint; with 1,000,000 targets most
    /// claimed rows sit on such pages (docs/operations.md "WAL compression").
    static func walCompression(bin: String) -> String {
        let configure = (try? Subprocess.run([bin + "/pg_config", "--configure"]))?.1 ?? ""
        return configure.contains("--with-lz4") ? "lz4" : "pglz"
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
