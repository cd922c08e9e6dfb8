import Crypto
import Foundation

/// Applies numbered SQL files to a database, once each, in order (`liverelay migrate`, and
/// `/readyz` through `pending`).
///
/// Files are named `NNNN_name.sql` (any number of digits, an underscore, a name); the migration's
/// name is the file name without `.sql` (e.g. `0001_init`) and files apply in numeric order.
/// Applied migrations are recorded in `schema_migrations(name, sha256, applied_at)` with the
/// SHA-256 of the file's bytes. Each file runs as one script (simple query protocol) in its own
/// transaction together with its record, so it must not contain `BEGIN`/`COMMIT` or statements
/// that cannot run in a transaction (`CREATE INDEX CONCURRENTLY`).
public struct Migrator: Sendable {
    /// The `pg_advisory_lock` key held for a whole `migrate` run ("LiveRela" in ASCII).
    public static let advisoryLockKey: Int64 = 0x4C69_7665_5265_6C61

    private struct File: Sendable {
        let name: String
        let sha256: String
        let sql: String
    }

    private let files: [File]

    /// Reads every `*.sql` file in `directory` (other files and dot-files are ignored).
    ///
    /// - Throws: `MigrationError.badFileName` for a `.sql` file not named `NNNN_name.sql`, a
    ///   repeated number, or a file that is not UTF-8; Foundation's error when the directory
    ///   cannot be listed or a file cannot be read.
    public init(directory: URL) throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        var numbered: [(number: Int, file: File)] = []
        for fileName in names where fileName.hasSuffix(".sql") && !fileName.hasPrefix(".") {
            let name = String(fileName.dropLast(4))
            let digits = name.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, let number = Int(digits),
                name.dropFirst(digits.count).first == "_", name.count > digits.count + 1
            else {
                throw MigrationError.badFileName(fileName)
            }
            let bytes = [UInt8](try Data(contentsOf: directory.appendingPathComponent(fileName)))
            guard let sql = String(validating: bytes, as: UTF8.self) else {
                throw MigrationError.badFileName(fileName)
            }
            numbered.append((number, File(name: name, sha256: Digest.sha256Hex(bytes), sql: sql)))
        }
        numbered.sort { $0.number < $1.number }
        for (previous, next) in zip(numbered, numbered.dropFirst()) where previous.number == next.number {
            throw MigrationError.badFileName(next.file.name + ".sql")
        }
        files = numbered.map(\.file)
    }

    /// Every migration in apply order: name (file name without `.sql`) and the lower-case hex
    /// SHA-256 of the file's bytes.
    public var migrations: [(name: String, sha256: String)] {
        files.map { (name: $0.name, sha256: $0.sha256) }
    }

    /// Applies every pending migration and returns their names, in order (empty when up to date).
    ///
    /// Holds `pg_advisory_lock(advisoryLockKey)` on one pooled session for the whole run, so
    /// concurrent migrators (other processes, other pools) wait and then find nothing to do.
    /// Creates `schema_migrations` when missing. Each file and its record commit together on
    /// that session; a failing file rolls back alone and stops the run (earlier ones stay applied).
    ///
    /// - Parameter log: receives one line per applied migration.
    /// - Throws: `MigrationError.modified`/`.missing` (before applying anything) when recorded
    ///   migrations disagree with the files; `PostgresError` from the pool or a failing script.
    @discardableResult
    public func migrate(pool: PostgresPool, log: (String) -> Void = { _ in }) throws -> [String] {
        try pool.withConnection { connection in
            try connection.query("SELECT pg_advisory_lock($1)", [Self.advisoryLockKey])
            defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [Self.advisoryLockKey]) }
            try connection.simpleQuery(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    name text PRIMARY KEY,
                    sha256 text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            let todo = try pendingFiles(recorded: try recorded(connection))
            var applied: [String] = []
            for file in todo {
                let started = ContinuousClock.now
                try connection.transaction { connection in
                    try connection.simpleQuery(file.sql)
                    try connection.execute(
                        "INSERT INTO schema_migrations (name, sha256) VALUES ($1, $2)",
                        [file.name, file.sha256])
                }
                applied.append(file.name)
                log("applied migration \(file.name) in \(ContinuousClock.now - started)")
            }
            return applied
        }
    }

    /// Names of migrations not yet applied, in order; all of them when `schema_migrations` does
    /// not exist. Takes no lock and changes nothing.
    ///
    /// - Throws: `MigrationError.modified`/`.missing` as `migrate` does; `PostgresError` from the pool.
    public func pending(pool: PostgresPool) throws -> [String] {
        try pool.withConnection { connection in
            let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
            guard try exists.first?.bool("present") == true else { return files.map(\.name) }
            return try pendingFiles(recorded: try recorded(connection)).map(\.name)
        }
    }

    private func recorded(_ connection: PostgresConnection) throws -> [String: String] {
        var out: [String: String] = [:]
        for row in try connection.query("SELECT name, sha256 FROM schema_migrations") {
            out[try row.string("name")] = try row.string("sha256")
        }
        return out
    }

    private func pendingFiles(recorded: [String: String]) throws -> [File] {
        let byName = Dictionary(files.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for (name, sha) in recorded.sorted(by: { $0.key < $1.key }) {
            guard let file = byName[name] else { throw MigrationError.missing(name) }
            guard file.sha256 == sha else { throw MigrationError.modified(name) }
        }
        return files.filter { recorded[$0.name] == nil }
    }
}
