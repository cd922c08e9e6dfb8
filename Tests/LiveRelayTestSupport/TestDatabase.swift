import Foundation
import Postgres
import Locking

/// A PostgreSQL database made for one test (or test class) on the throwaway cluster that
/// `deploy/local/test` starts, dropped by `drop()`. A migrated database is a clone
/// (`CREATE DATABASE … TEMPLATE`) of one template migrated once per test process, so the
/// migrations run once, not once per test. Throws `FixtureFailure` when the cluster is not
/// configured (`LIVERELAY_TEST_DATABASE_URL`, set by deploy/local/test).
public final class TestDatabase: Sendable {
    /// The database's name (`<prefix>_<random hex>`).
    public let name: String
    /// Connection string of this database.
    public let conninfo: String
    /// Connection string of the cluster's default database (role `liverelay`, CREATEDB).
    public let adminConninfo: String

    /// - Parameters:
    ///   - prefix: start of the name, to tell the suites' databases apart.
    ///   - migrated: `true` clones the migrated template (every file of `Migrations/`);
    ///     `false` makes an empty database.
    public init(prefix: String = "lr_test", migrated: Bool = true) throws {
        let base = try Self.baseURL()
        adminConninfo = base
        name = Self.uniqueName(prefix)
        let template = migrated ? try Self.migratedTemplate(base: base) : nil
        let admin = try PostgresConnection(base)
        defer { admin.close() }
        _ = try admin.execute("CREATE DATABASE \(name)" + (template.map { " TEMPLATE \($0)" } ?? ""))
        conninfo = Self.conninfo(base, database: name)
    }

    /// A new connection to this database.
    public func connect() throws -> PostgresConnection { try PostgresConnection(conninfo) }

    /// Drops the database, closing whatever connections are still open to it (`WITH (FORCE)`,
    /// so no listener needs to be waited for).
    public func drop() {
        guard let admin = try? PostgresConnection(adminConninfo) else { return }
        defer { admin.close() }
        _ = try? admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }

    // MARK: environment

    /// `LIVERELAY_TEST_DATABASE_URL` (role `liverelay`, CREATEDB); `FixtureFailure` when unset.
    public static func baseURL() throws -> String { try value("LIVERELAY_TEST_DATABASE_URL") }

    /// `LIVERELAY_TEST_ADMIN_DATABASE_URL` (superuser); `FixtureFailure` when unset.
    public static func adminURL() throws -> String { try value("LIVERELAY_TEST_ADMIN_DATABASE_URL") }

    /// The repository's root: `LIVERELAY_TEST_REPO_ROOT` (deploy/local/test), else found from
    /// this file's path.
    public static var repoRoot: String {
        ProcessInfo.processInfo.environment["LIVERELAY_TEST_REPO_ROOT"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The product's migrator over `<repo>/Migrations`.
    public static func migrator() throws -> Migrator {
        try Migrator(directory: URL(fileURLWithPath: repoRoot + "/Migrations"))
    }

    /// `base` pointing at database `name` (URI or key/value conninfo).
    public static func conninfo(_ base: String, database name: String) -> String {
        guard let schemeEnd = base.range(of: "://")?.upperBound else { return base + " dbname=" + name }
        let rest = base[schemeEnd...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let afterAuthority = rest[authorityEnd...]
        let query = afterAuthority.firstIndex(of: "?").map { afterAuthority[$0...] } ?? ""
        return String(base[..<schemeEnd]) + rest[..<authorityEnd] + "/" + name + query
    }

    private static func value(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            throw FixtureFailure(
                "\(name) is not set: run deploy/local/test, or start deploy/local/pg-cluster and export "
                    + "LIVERELAY_TEST_DATABASE_URL / LIVERELAY_TEST_ADMIN_DATABASE_URL from its output")
        }
        return value
    }

    private static func uniqueName(_ prefix: String) -> String {
        prefix + "_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
    }

    private static let template = Locked<String?>(nil)

    /// One migrated database per test process (made on first use), the template of every
    /// migrated `TestDatabase`.
    static func migratedTemplate(base: String) throws -> String {
        try template.withLock { name in
            if let name { return name }
            let made = uniqueName("lr_tpl")
            let admin = try PostgresConnection(base)
            _ = try admin.execute("CREATE DATABASE \(made)")
            admin.close()
            let pool = PostgresPool(conninfo: conninfo(base, database: made), maxConnections: 1)
            defer { pool.close() }
            try migrator().migrate(pool: pool)
            name = made
            return made
        }
    }
}
