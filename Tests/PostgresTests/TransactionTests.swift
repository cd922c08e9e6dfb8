import Foundation
import Locking
import XCTest
@testable import Postgres
import LiveRelayTestSupport

private struct BodyError: Error, Equatable {}

/// Constraint errors, rollback, serialization-failure retry and transaction-local settings.
final class TransactionTests: XCTestCase {
    private var database: TestDatabase!
    private var pool: PostgresPool!

    override func setUpWithError() throws {
        database = try TestDatabase(migrated: false)
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 4)
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE items (id int PRIMARY KEY, email text CONSTRAINT items_email_key UNIQUE)") }
    }

    override func tearDown() {
        pool?.close()
        database?.drop()
    }

    private func count() throws -> Int {
        try pool.withConnection { try $0.query("SELECT count(*) AS n FROM items").first!.int("n") }
    }

    func testUniqueViolationCarriesSQLStateAndConstraint() throws {
        try pool.withConnection { connection in
            try connection.execute("INSERT INTO items VALUES (1, $1)", ["a@example.com"])
            let error = assertPostgresError(.query) {
                try connection.execute("INSERT INTO items VALUES (2, $1)", ["a@example.com"])
            }
            XCTAssertEqual(error?.sqlState, "23505")
            XCTAssertEqual(error?.constraint, "items_email_key")
            XCTAssertEqual(error?.isUniqueViolation, true)
            XCTAssertTrue(connection.isHealthy, "a constraint error must not break the connection")
            XCTAssertEqual(try connection.query("SELECT 1 AS one").first?.int("one"), 1)
        }
    }

    func testTransactionRollsBackOnServerError() throws {
        let error = assertPostgresError(.query) {
            try pool.transaction { connection in
                try connection.execute("INSERT INTO items VALUES (1, 'x')")
                try connection.execute("INSERT INTO items VALUES (1, 'y')")
            }
        }
        XCTAssertEqual(error?.constraint, "items_pkey")
        XCTAssertEqual(try count(), 0)
    }

    func testTransactionRollsBackAndRethrowsNonPostgresBodyErrorAsIs() throws {
        var runs = 0
        XCTAssertThrowsError(
            try pool.transaction { connection in
                runs += 1
                try connection.execute("INSERT INTO items VALUES (1, 'x')")
                throw BodyError()
            }
        ) { XCTAssertEqual($0 as? BodyError, BodyError()) }
        XCTAssertEqual(runs, 1)
        XCTAssertEqual(try count(), 0)
        XCTAssertEqual(pool.stats.inUse, 0)
    }

    func testSwallowedErrorInBodyDoesNotSilentlyCommit() throws {
        let error = assertPostgresError(.query) {
            try pool.transaction { connection in
                try connection.execute("INSERT INTO items VALUES (1, 'x')")
                _ = try? connection.execute("INSERT INTO items VALUES (1, 'x')")  // aborts the transaction
                return 42
            }
        }
        XCTAssertEqual(error?.sqlState, "23505")
        XCTAssertEqual(try count(), 0)
    }

    func testCommitPersistsAndReturnsBodyValue() throws {
        let value = try pool.transaction(isolation: .repeatableRead) { connection in
            try connection.execute("INSERT INTO items VALUES (1, 'x')")
            return "done"
        }
        XCTAssertEqual(value, "done")
        XCTAssertEqual(try count(), 1)
    }

    func testSetConfigIsVisibleInsideTransactionAndGoneAfter() throws {
        let single = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        defer { single.close() }
        let (inside, isolation) = try single.transaction(isolation: .serializable, settings: [("app.tenant_id", "tenant-'1'"), ("app.other", "x")]) {
            connection in
            let row = try connection.query("SELECT current_setting('app.tenant_id', true) AS t, current_setting('transaction_isolation') AS i").first!
            return (try row.optionalString("t"), try row.string("i"))
        }
        XCTAssertEqual(inside, "tenant-'1'")
        XCTAssertEqual(isolation, "serializable")
        let after = try single.withConnection { connection in
            try connection.query("SELECT current_setting('app.tenant_id', true) AS t").first!.optionalString("t")
        }
        XCTAssertTrue(after == nil || after == "", "setting leaked out of the transaction: \(after ?? "nil")")
        XCTAssertEqual(single.stats.open, 1, "the same session was reused")
    }

    /// Write skew: two doctors on call, each serializable transaction takes itself off call if
    /// the other is still on. Both read before either writes (a barrier on the first attempt),
    /// so SSI must abort one with 40001; the retry sees the other's commit.
    func testSerializationFailureIsRetriedUntilCorrect() throws {
        try pool.withConnection {
            try $0.simpleQuery(
                "CREATE TABLE doctors (name text PRIMARY KEY, on_call bool NOT NULL); INSERT INTO doctors VALUES ('alice', true), ('bob', true)")
        }
        let runs = Locked([0, 0])
        let readDone = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let failures = Locked<[String]>([])
        let names = ["alice", "bob"]
        let pool = self.pool!
        runOnThreads(2) { i in
            do {
                try pool.transaction(isolation: .serializable, maxAttempts: 10) { connection in
                    let attempt = runs.withLock {
                        $0[i] += 1; return $0[i]
                    }
                    let onCall = try connection.query("SELECT count(*) AS n FROM doctors WHERE on_call").first!.int("n")
                    if attempt == 1 {
                        readDone[i].signal()
                        _ = readDone[1 - i].wait(timeout: .now() + 10)
                    }
                    if onCall >= 2 {
                        try connection.execute("UPDATE doctors SET on_call = false WHERE name = $1", [names[i]])
                    }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(failures.current, [])
        XCTAssertGreaterThan(runs.current.reduce(0, +), 2, "one body must have run again after 40001")
        let stillOnCall = try pool.withConnection { try $0.query("SELECT count(*) AS n FROM doctors WHERE on_call").first!.int("n") }
        XCTAssertEqual(stillOnCall, 1, "exactly one doctor stays on call")
    }

    func testSerializationFailureGivesUpAfterMaxAttempts() throws {
        var runs = 0
        let error = assertPostgresError(.query) {
            try pool.transaction(maxAttempts: 3) { connection in
                runs += 1
                try connection.query("SELECT 1")
                throw PostgresError(kind: .query, message: "simulated", sqlState: "40001")
            }
        }
        XCTAssertEqual(error?.sqlState, "40001")
        XCTAssertEqual(runs, 3)
    }
}
