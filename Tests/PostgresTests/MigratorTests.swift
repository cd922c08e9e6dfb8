import Foundation
import Locking
import Crypto
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// Migrator against fresh databases: apply, no-op re-run, refusals, and concurrent runs.
final class MigratorTests: XCTestCase {
    private var database: TestDatabase!
    private var directory: URL!

    private static let files = [
        "0001_counter.sql": "CREATE TABLE counter (n int NOT NULL);\nSELECT pg_sleep(0.2);\n",
        "0002_insert.sql": "INSERT INTO counter VALUES (1);\n",
        "0010_more.sql": "CREATE TABLE more (id text PRIMARY KEY);\nCREATE INDEX more_id ON more (id);\n"
    ]
    private let names = ["0001_counter", "0002_insert", "0010_more"]

    override func setUpWithError() throws {
        database = try TestDatabase(migrated: false)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("lr-migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (name, sql) in Self.files { try write(name, sql) }
        try write("README.md", "not a migration")
    }

    override func tearDown() {
        database?.drop()
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    /// A one-connection pool on the test database, migrated with the files written so far
    /// (closed again when migrating fails); the caller closes it.
    private func migratedPool() throws -> PostgresPool {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        do { try Migrator(directory: directory).migrate(pool: pool) } catch {
            pool.close()
            throw error
        }
        return pool
    }

    private func write(_ name: String, _ text: String) throws {
        try Data(text.utf8).write(to: directory.appendingPathComponent(name))
    }

    private func scalar(_ pool: PostgresPool, _ sql: String) throws -> Int {
        try pool.withConnection { try $0.query(sql).first!.int("n") }
    }

    func testFreshDatabaseAppliesAllInOrderThenReRunIsNoOp() throws {
        let migrator = try Migrator(directory: directory)
        XCTAssertEqual(migrator.migrations.map(\.name), names)
        XCTAssertEqual(migrator.migrations[1].sha256, Digest.sha256Hex(Array(Self.files["0002_insert.sql"]!.utf8)))
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        defer { pool.close() }
        XCTAssertEqual(try migrator.pending(pool: pool), names)
        var logged: [String] = []
        XCTAssertEqual(try migrator.migrate(pool: pool) { logged.append($0) }, names)
        XCTAssertEqual(logged.count, 3)
        XCTAssertEqual(try migrator.pending(pool: pool), [])
        let recorded = try pool.withConnection { try $0.query("SELECT name, sha256, applied_at FROM schema_migrations ORDER BY name") }
        XCTAssertEqual(try recorded.map { try $0.string("name") }, names)
        XCTAssertEqual(try recorded.map { try $0.string("sha256") }, migrator.migrations.map(\.sha256))
        XCTAssertEqual(try recorded[0].date("applied_at").timeIntervalSinceNow, 0, accuracy: 60)

        XCTAssertEqual(try Migrator(directory: directory).migrate(pool: pool), [])
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM counter"), 1)
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM schema_migrations"), 3)
    }

    func testNewFileIsAppliedOnNextRun() throws {
        let pool = try migratedPool()
        defer { pool.close() }
        try write("0011_next.sql", "INSERT INTO counter VALUES (2);")
        XCTAssertEqual(try Migrator(directory: directory).pending(pool: pool), ["0011_next"])
        XCTAssertEqual(try Migrator(directory: directory).migrate(pool: pool), ["0011_next"])
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM counter"), 2)
    }

    func testEditedMigrationIsRefused() throws {
        let pool = try migratedPool()
        defer { pool.close() }
        try write("0002_insert.sql", "INSERT INTO counter VALUES (1), (1);\n")
        try write("0011_next.sql", "INSERT INTO counter VALUES (2);")
        let edited = try Migrator(directory: directory)
        XCTAssertThrowsError(try edited.migrate(pool: pool)) { XCTAssertEqual($0 as? MigrationError, .modified("0002_insert")) }
        XCTAssertThrowsError(try edited.pending(pool: pool)) { XCTAssertEqual($0 as? MigrationError, .modified("0002_insert")) }
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM counter"), 1, "nothing may run after a refusal")
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM schema_migrations"), 3)
    }

    func testMissingMigrationIsRefused() throws {
        let pool = try migratedPool()
        defer { pool.close() }
        try FileManager.default.removeItem(at: directory.appendingPathComponent("0010_more.sql"))
        XCTAssertThrowsError(try Migrator(directory: directory).migrate(pool: pool)) {
            XCTAssertEqual($0 as? MigrationError, .missing("0010_more"))
        }
    }

    func testFailingMigrationRollsBackAloneAndStops() throws {
        try write("0003_broken.sql", "INSERT INTO counter VALUES (3);\nSELECT * FROM no_such_table;\n")
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        defer { pool.close() }
        let migrator = try Migrator(directory: directory)
        let error = assertPostgresError(.query) { try migrator.migrate(pool: pool) }
        XCTAssertEqual(error?.sqlState, "42P01")
        XCTAssertEqual(try migrator.pending(pool: pool), ["0003_broken", "0010_more"])
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM counter"), 1, "the broken file's insert was rolled back")
        XCTAssertEqual(try scalar(pool, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory'"), 0, "advisory lock released")
    }

    func testBadFileNamesAreRejected() throws {
        try write("init.sql", "SELECT 1;")
        XCTAssertThrowsError(try Migrator(directory: directory)) { XCTAssertEqual($0 as? MigrationError, .badFileName("init.sql")) }
        try FileManager.default.removeItem(at: directory.appendingPathComponent("init.sql"))
        try write("0002_again.sql", "SELECT 1;")
        XCTAssertThrowsError(try Migrator(directory: directory)) {
            guard case .badFileName = $0 as? MigrationError else { return XCTFail("\($0)") }
        }
    }

    func testConcurrentMigratorsApplyEachFileExactlyOnce() throws {
        let migrator = try Migrator(directory: directory)
        let conninfo = database.conninfo
        let results = Locked<[[String]]>([])
        let errors = Locked<[String]>([])
        let start = DispatchSemaphore(value: 0)
        let pools = [PostgresPool(conninfo: conninfo, maxConnections: 2), PostgresPool(conninfo: conninfo, maxConnections: 2)]
        defer { for p in pools { p.close() } }
        // Open one session per pool first so both start migrating at the same moment.
        for pool in pools { try pool.withConnection { _ in } }
        let ready = DispatchGroup()
        ready.enter()
        ready.enter()
        DispatchQueue.global().async {
            ready.wait()
            start.signal()
            start.signal()
        }
        runOnThreads(2) { i in
            ready.leave()
            start.wait()
            do {
                let applied = try migrator.migrate(pool: pools[i])
                results.withLock { $0.append(applied) }
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(errors.current, [])
        XCTAssertEqual(results.current.flatMap { $0 }.sorted(), names, "each file applied by exactly one migrator")
        XCTAssertEqual(try scalar(pools[0], "SELECT count(*) AS n FROM counter"), 1, "the inserting migration ran once")
        XCTAssertEqual(try scalar(pools[0], "SELECT count(DISTINCT name) AS n FROM schema_migrations"), 3)
        XCTAssertEqual(try scalar(pools[0], "SELECT count(*) AS n FROM schema_migrations"), 3)
    }
}
