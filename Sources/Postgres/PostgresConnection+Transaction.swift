import CLibPQ

extension PostgresConnection {
    /// Runs `body` in one transaction on this connection, once (no retry; `PostgresPool.transaction`
    /// adds retries on serialization failures).
    ///
    /// `BEGIN ISOLATION LEVEL …`; `SELECT set_config(name, value, true), …` for all settings at once
    /// (transaction-local, like `SET LOCAL`, e.g. `("app.tenant_id", id)` for row-level security);
    /// `body`; `COMMIT`. Any error rolls back and is rethrown as-is (non-Postgres body errors
    /// included). If `body` swallowed a server error, leaving the transaction aborted, that
    /// error is rethrown instead of committing.
    ///
    /// - Throws: whatever `BEGIN`, `set_config`, `body` or `COMMIT` threw.
    @discardableResult
    public func transaction<T>(isolation: IsolationLevel = .readCommitted, settings: [(String, String)] = [],
                               _ body: (PostgresConnection) throws -> T) throws -> T {
        try execute("BEGIN ISOLATION LEVEL " + isolation.sql)
        lastError = nil
        do {
            if !settings.isEmpty {  // one round trip for all of them
                let calls = settings.indices.map { "set_config($\($0 * 2 + 1), $\($0 * 2 + 2), true)" }.joined(separator: ", ")
                try query("SELECT " + calls, settings.flatMap { [$0.0, $0.1] as [(any PostgresBindable)?] })
            }
            let result = try body(self)
            if transactionStatus == PQTRANS_INERROR {
                throw lastError ?? PostgresError(kind: .query, message: "transaction was aborted by an earlier error")
            }
            try execute("COMMIT")
            return result
        } catch {
            rollbackQuietly()
            throw error
        }
    }

    /// `ROLLBACK` when a transaction is open; errors ignored (a broken connection is discarded by
    /// the pool anyway).
    func rollbackQuietly() {
        guard isHealthy, let status = transactionStatus, status != PQTRANS_IDLE else { return }
        _ = try? execute("ROLLBACK")
    }

    /// Makes a connection returned to the pool reusable: rolls back an open transaction and
    /// drops LISTEN subscriptions. False when it should be discarded instead.
    func resetForPool() -> Bool {
        guard isHealthy else { return false }
        rollbackQuietly()
        if hasListened {
            guard (try? execute("UNLISTEN *")) != nil else { return false }
            hasListened = false
        }
        _ = drainNotifications()
        return isHealthy && transactionStatus == PQTRANS_IDLE
    }
}
