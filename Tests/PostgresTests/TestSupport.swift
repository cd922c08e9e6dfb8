import Foundation
import XCTest
@testable import Postgres

/// Environment of the real PostgreSQL the tests run against (deploy/local/test sets both).
enum TestEnvironment {
    /// `LIVERELAY_TEST_DATABASE_URL` (role `liverelay`, CREATEDB); the test fails when unset.
    static func databaseURL() throws -> String {
        try value("LIVERELAY_TEST_DATABASE_URL")
    }

    /// `LIVERELAY_TEST_ADMIN_DATABASE_URL` (superuser); the test fails when unset.
    static func adminURL() throws -> String {
        try value("LIVERELAY_TEST_ADMIN_DATABASE_URL")
    }

    private static func value(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            throw FixtureFailure("\(name) is not set: run deploy/local/test, or start deploy/local/pg-cluster and export "
                + "LIVERELAY_TEST_DATABASE_URL / LIVERELAY_TEST_ADMIN_DATABASE_URL from its output")
        }
        return value
    }

    /// `base` pointing at database `name` (URI or key/value conninfo).
    static func conninfo(_ base: String, database name: String) -> String {
        guard let schemeEnd = base.range(of: "://")?.upperBound else { return base + " dbname=" + name }
        let rest = base[schemeEnd...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let afterAuthority = rest[authorityEnd...]
        let query = afterAuthority.firstIndex(of: "?").map { afterAuthority[$0...] } ?? ""
        return String(base[..<schemeEnd]) + rest[..<authorityEnd] + "/" + name + query
    }
}

/// A database created for one test (the `liverelay` role has CREATEDB) and dropped after.
final class TestDatabase {
    let name: String
    let conninfo: String
    private let baseURL: String

    init() throws {
        baseURL = try TestEnvironment.databaseURL()
        name = "lr_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let admin = try PostgresConnection(baseURL)
        defer { admin.close() }
        try admin.simpleQuery("CREATE DATABASE \"\(name)\"")
        conninfo = TestEnvironment.conninfo(baseURL, database: name)
    }

    /// A new connection to this database.
    func connect() throws -> PostgresConnection { try PostgresConnection(conninfo) }

    func drop() {
        guard let admin = try? PostgresConnection(baseURL) else { return }
        defer { admin.close() }
        try? admin.simpleQuery("DROP DATABASE IF EXISTS \"\(name)\" WITH (FORCE)")
    }
}

/// A value shared between test threads, guarded by a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
    var current: Value { withLock { $0 } }
}

/// Runs `body(i)` for i in 0..<count on `count` separate threads and waits for all of them.
func runOnThreads(_ count: Int, timeoutSeconds: Double = 60, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for i in 0..<count {
        group.enter()
        let thread = Thread {
            body(i)
            group.leave()
        }
        thread.start()
    }
    if group.wait(timeout: .now() + timeoutSeconds) == .timedOut {
        XCTFail("threads did not finish within \(timeoutSeconds) s")
    }
}

/// Asserts that `body` throws a `PostgresError` of `kind` and returns it.
@discardableResult
func assertPostgresError<T>(_ kind: PostgresError.Kind, file: StaticString = #filePath, line: UInt = #line,
                            _ body: () throws -> T) -> PostgresError? {
    do {
        _ = try body()
        XCTFail("expected PostgresError(\(kind)), nothing thrown", file: file, line: line)
    } catch let error as PostgresError {
        XCTAssertEqual("\(error.kind)", "\(kind)", "\(error)", file: file, line: line)
        return error
    } catch {
        XCTFail("expected PostgresError(\(kind)), got \(error)", file: file, line: line)
    }
    return nil
}

/// Terminates backend `pid` as superuser and waits up to 5 s for it to exit.
func terminateBackend(_ pid: Int32) throws {
    let admin = try PostgresConnection(try TestEnvironment.adminURL())
    defer { admin.close() }
    let rows = try admin.query("SELECT pg_terminate_backend($1, 5000) AS ok", [pid])
    XCTAssertEqual(try rows.first?.bool("ok"), true, "could not terminate backend \(pid)")
}
