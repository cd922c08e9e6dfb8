import Foundation
import XCTest
@testable import Postgres
import LiveRelayTestSupport

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
func assertPostgresError<T>(
    _ kind: PostgresError.Kind, file: StaticString = #filePath, line: UInt = #line,
    _ body: () throws -> T
) -> PostgresError? {
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
    let admin = try PostgresConnection(try TestDatabase.adminURL())
    defer { admin.close() }
    let rows = try admin.query("SELECT pg_terminate_backend($1, 5000) AS ok", [pid])
    XCTAssertEqual(try rows.first?.bool("ok"), true, "could not terminate backend \(pid)")
}
