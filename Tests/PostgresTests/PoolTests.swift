import Foundation
import Locking
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// Pool bounds, waiting, timeouts, and replacement of broken connections.
final class PoolTests: XCTestCase {
    private var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase(migrated: false)
    }

    override func tearDown() {
        database?.drop()
    }

    func testFiftyConcurrentTransactionsOnEightConnectionsComplete() throws {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 8, acquireTimeoutSeconds: 30)
        defer { pool.close() }
        try pool.withConnection { try $0.execute("CREATE TABLE hits (n int PRIMARY KEY)") }
        let errors = Locked<[String]>([])
        let maxInUse = Locked(0)
        runOnThreads(50) { i in
            do {
                try pool.transaction { connection in
                    let inUse = pool.stats.inUse
                    maxInUse.withLock { $0 = max($0, inUse) }
                    try connection.execute("INSERT INTO hits VALUES ($1)", [i])
                    try connection.query("SELECT pg_sleep(0.01)")
                }
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(errors.current, [])
        XCTAssertEqual(try pool.withConnection { try $0.query("SELECT count(*) AS n FROM hits").first!.int("n") }, 50)
        let stats = pool.stats
        XCTAssertLessThanOrEqual(stats.open, 8)
        XCTAssertLessThanOrEqual(maxInUse.current, 8)
        XCTAssertEqual(stats.inUse, 0)
        XCTAssertEqual(stats.waiting, 0)
        XCTAssertEqual(stats.idle, stats.open)
        XCTAssertEqual(stats.maxConnections, 8)
    }

    /// Holds `count` distinct connections at once (nested borrows) and returns their backend pids.
    private func borrowAll(_ pool: PostgresPool, _ count: Int, _ collected: [Int32] = []) throws -> [Int32] {
        guard collected.count < count else { return collected }
        return try pool.withConnection { connection in
            let pid = Int32(try connection.query("SELECT pg_backend_pid() AS pid").first!.int("pid"))
            XCTAssertEqual(pid, connection.backendPID)
            return try borrowAll(pool, count, collected + [pid])
        }
    }

    func testTerminatedBackendsAreReplaced() throws {
        _ = try TestDatabase.adminURL()
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 4)
        defer { pool.close() }
        let before = try borrowAll(pool, 4)
        XCTAssertEqual(Set(before).count, 4)
        XCTAssertEqual(pool.stats.idle, 4)
        // Every pooled backend dies, as in a server restart.
        for pid in before { try terminateBackend(pid) }
        let after = try borrowAll(pool, 4)
        XCTAssertEqual(Set(after).count, 4)
        XCTAssertTrue(Set(after).isDisjoint(with: before), "stale sessions were handed out again")
        XCTAssertEqual(try pool.transaction { try $0.query("SELECT 1 AS one").first!.int("one") }, 1)
        XCTAssertEqual(pool.stats.open, 4)
    }

    func testConnectionBrokenDuringBodyIsDiscardedNotReturned() throws {
        _ = try TestDatabase.adminURL()
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 2)
        defer { pool.close() }
        let oldPID = try pool.withConnection { connection in
            let pid = connection.backendPID
            try terminateBackend(pid)
            assertPostgresError(.connection) { try connection.query("SELECT 1") }
            XCTAssertFalse(connection.isHealthy)
            return pid
        }
        XCTAssertEqual(pool.stats.open, 0, "the broken connection went back into the pool")
        let newPID = try pool.withConnection { $0.backendPID }
        XCTAssertNotEqual(newPID, oldPID)
    }

    func testAcquireTimesOutWhenAllConnectionsAreHeld() throws {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 2, acquireTimeoutSeconds: 0.5)
        defer { pool.close() }
        try pool.withConnection { _ in
            try pool.withConnection { _ in
                let started = Date()
                assertPostgresError(.poolTimeout) { try pool.withConnection { _ in } }
                let elapsed = Date().timeIntervalSince(started)
                XCTAssertGreaterThanOrEqual(elapsed, 0.45)
                XCTAssertLessThan(elapsed, 2.0)
                XCTAssertEqual(pool.stats.inUse, 2)
            }
        }
        XCTAssertEqual(pool.stats.waiting, 0)
        try pool.withConnection { _ in }  // usable again
    }

    func testWaiterGetsConnectionReleasedByAnotherThread() throws {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1, acquireTimeoutSeconds: 10)
        defer { pool.close() }
        let holding = DispatchSemaphore(value: 0)
        let waited = Locked(0.0)
        runOnThreads(2) { i in
            if i == 0 {
                try? pool.withConnection { _ in
                    holding.signal()
                    Thread.sleep(forTimeInterval: 0.3)
                }
            } else {
                holding.wait()
                let started = Date()
                try? pool.withConnection { _ in waited.withLock { $0 = Date().timeIntervalSince(started) } }
            }
        }
        XCTAssertGreaterThan(waited.current, 0.1)
        XCTAssertEqual(pool.stats.open, 1)
    }

    func testConnectingWhileServerIsDownFailsFast() throws {
        let pool = PostgresPool(conninfo: "host=/tmp/liverelay-no-such-server-dir dbname=x user=x connect_timeout=2", maxConnections: 2)
        defer { pool.close() }
        let started = Date()
        assertPostgresError(.connection) { try pool.transaction { _ in } }
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.0)
        XCTAssertEqual(pool.stats.open, 0)
        XCTAssertEqual(pool.stats.inUse, 0)
    }

    func testClosedPoolRefusesAcquisitions() throws {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 2)
        try pool.withConnection { _ in }
        XCTAssertEqual(pool.stats.idle, 1)
        pool.close()
        XCTAssertEqual(pool.stats.open, 0)
        assertPostgresError(.closed) { try pool.withConnection { _ in } }
    }

    func testOpenTransactionAndListenAreResetBeforeReuse() throws {
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        defer { pool.close() }
        try pool.withConnection { connection in
            try connection.execute("BEGIN")
            try connection.execute("CREATE TABLE leaked (n int)")
            try connection.listen("some_channel")
        }
        try pool.withConnection { connection in
            XCTAssertEqual(try connection.query("SELECT to_regclass('leaked') IS NULL AS gone").first?.bool("gone"), true)
            XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM pg_listening_channels()").first?.int("n"), 0)
        }
    }
}
