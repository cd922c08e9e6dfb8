import Foundation
import Crypto
import Logging
import LiveRelayStore
import Postgres

/// Resolved database, key-encryption key and migrations for one process: the embedded
/// cluster when no `DATABASE_URL` is set, the generated KEK in embedded mode (docs/configuration.md).
final class Runtime {
    let config: Configuration
    let log: Logger
    let conninfo: String
    let kek: [UInt8]
    let embedded: EmbeddedPostgres?
    let migrator: Migrator

    /// - Parameter needKEK: false for commands that never touch stored secrets.
    init(config: Configuration, log: Logger) throws {
        self.config = config
        self.log = log
        migrator = try Migrator(directory: try Self.migrationsDirectory(config.process.migrationsDirectory))
        if let url = config.databaseURL {
            conninfo = url
            embedded = nil
            kek = config.kek!  // validated by Configuration.load
        } else {
            let e = EmbeddedPostgres(home: config.home, log: log)
            try e.start()
            embedded = e
            conninfo = e.conninfo
            kek = try config.kek ?? Self.embeddedKEK(home: config.home, log: log)
        }
    }

    /// Opens a pool and applies pending migrations.
    /// Refuses (ConfigurationError, one line) a SUPERUSER or BYPASSRLS role unless
    /// `LIVERELAY_ALLOW_PRIVILEGED_ROLE=1` (docs/security.md "Database").
    func openDatabase(poolSize: Int) throws -> PostgresPool {
        let pool = PostgresPool(conninfo: conninfo, maxConnections: poolSize, acquireTimeoutSeconds: 5)
        let role = try RolePrivileges.of(pool)
        if let refusal = role.refusal {
            if config.allowPrivilegedRole {
                log.warning("running with a privileged database role (LIVERELAY_ALLOW_PRIVILEGED_ROLE=1)", ["role": .string(role.role)])
            } else {
                pool.close()
                throw ConfigurationError(problems: [refusal])
            }
        }
        let applied = try migrator.migrate(pool: pool) { line in self.log.info(line) }
        if !applied.isEmpty { log.info("migrations applied", ["names": .array(applied.map { .string($0) })]) }
        return pool
    }

    /// Stops the embedded cluster if this process started it.
    func shutdown() { embedded?.stop() }

    /// `<home>/kek`: 32 random bytes, base64, mode 0600, made on first use (embedded mode only).
    static func embeddedKEK(home: URL, log: Logger) throws -> [UInt8] {
        let path = home.appendingPathComponent("kek").path
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            guard let d = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), d.count == 32 else {
                throw ConfigurationError(problems: [
                    "\(path) does not hold the base64 of 32 bytes; restore it or remove it (stored secrets then become unreadable)"
                ])
            }
            return Array(d)
        }
        let key = SecureRandom.bytes(32)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(
            atPath: path, contents: Data((Data(key).base64EncodedString() + "\n").utf8),
            attributes: [.posixPermissions: 0o600])
        log.info("generated a key-encryption key for embedded mode", ["path": .string(path)])
        return key
    }

    /// The `Migrations/` directory: `configured` (`LIVERELAY_MIGRATIONS_DIR`), `./Migrations`, or the
    /// repository the executable was built in (`<repo>/.build/<triple>/<config>/liverelay`).
    static func migrationsDirectory(_ configured: String?) throws -> URL {
        var candidates: [String] = []
        if let configured { candidates.append(configured) }
        candidates.append(FileManager.default.currentDirectoryPath + "/Migrations")
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var u = URL(fileURLWithPath: exe).deletingLastPathComponent()
            for _ in 0..<4 {
                candidates.append(u.appendingPathComponent("Migrations").path)
                u = u.deletingLastPathComponent()
            }
        }
        for c in candidates where FileManager.default.fileExists(atPath: c + "/0001_tenancy.sql") {
            return URL(fileURLWithPath: c)
        }
        throw ConfigurationError(problems: ["cannot find the Migrations directory; set LIVERELAY_MIGRATIONS_DIR"])
    }
}
