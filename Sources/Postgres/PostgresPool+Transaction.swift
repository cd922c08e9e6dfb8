import Foundation

extension PostgresPool {
    /// Runs `body` in a transaction on a pooled connection, retrying serialization failures.
    ///
    /// `BEGIN ISOLATION LEVEL …`; for each `(name, value)` in `settings`,
    /// `SELECT set_config(name, value, true)` (transaction-local like `SET LOCAL`; e.g.
    /// `("app.tenant_id", id)` for row-level security); `body`; `COMMIT`.
    /// With `lazyBegin`, `BEGIN` and the settings ride in front of the body's first statement
    /// (see `PostgresConnection.transaction(…lazyBegin:)`).
    /// SQLSTATE 40001/40P01 anywhere (including at COMMIT) rolls back and runs `body` again on a
    /// fresh transaction after a jittered exponential backoff (about 5 ms doubling, capped at
    /// 250 ms), up to `maxAttempts` runs in total, so `body` must be safe to repeat. Any other
    /// error rolls back and is rethrown as-is (non-Postgres body errors included). A connection
    /// that breaks before `body` starts (a stale pooled session) is replaced and retried without
    /// counting as an attempt (at most twice).
    ///
    /// - Throws: the last serialization failure after `maxAttempts`, or any other error from the
    ///   pool, the statements, or `body`.
    @discardableResult
    public func transaction<T>(
        isolation: IsolationLevel = .readCommitted, settings: [(String, String)] = [],
        maxAttempts: Int = 5, lazyBegin: Bool = false,
        _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        var attempt = 0
        var staleRetries = 0
        while true {
            attempt += 1
            var gotConnection = false
            var bodyStarted = false
            do {
                return try withConnection { connection in
                    gotConnection = true
                    do {
                        return try connection.transaction(isolation: isolation, settings: settings, lazyBegin: lazyBegin) { connection in
                            bodyStarted = true
                            return try body(connection)
                        }
                    } catch let e as PostgresError where e.kind == .connection && connection.beginFailedOnConnection {
                        bodyStarted = false  // the lazy BEGIN never reached a live session
                        throw e
                    }
                }
            } catch let error as PostgresError where error.isSerializationFailure && attempt < maxAttempts {
                Thread.sleep(forTimeInterval: Self.backoffSeconds(attempt: attempt))
            } catch let error as PostgresError
                where error.kind == .connection && gotConnection && !bodyStarted
                && staleRetries < 2
            {
                staleRetries += 1
                attempt -= 1
            }
        }
    }

    /// Full-jitter backoff in seconds before re-running attempt `attempt + 1`.
    static func backoffSeconds(attempt: Int) -> Double {
        let cap = min(0.25, 0.005 * pow(2, Double(min(attempt - 1, 10))))
        return Double.random(in: cap / 2...cap)
    }
}
