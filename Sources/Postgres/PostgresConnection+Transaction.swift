import CLibPQ

extension PostgresConnection {
    /// Runs `body` in one transaction on this connection, once (no retry; `PostgresPool.transaction`
    /// adds retries on serialization failures).
    ///
    /// `BEGIN ISOLATION LEVEL …`; `SELECT set_config(name, value, true), …` for all settings at once
    /// (transaction-local, like `SET LOCAL`, e.g. `("app.tenant_id", id)` for row-level security);
    /// `body`; `COMMIT`. With `lazyBegin` the `BEGIN` and the settings are not sent on their own:
    /// they travel in front of the body's first statement (one pipeline, see `pipeline`), and a
    /// body that sends nothing opens no transaction at all. A body may send the `COMMIT` itself
    /// in its last pipeline (`pipeline(_:commit: true)`). Any error rolls back and is rethrown
    /// as-is (non-Postgres body errors included). If `body` swallowed a server error, leaving
    /// the transaction aborted, that error is rethrown instead of committing. When it ends,
    /// the transaction's round trips are reported to `PostgresInstrumentation`'s observer.
    ///
    /// - Throws: whatever `BEGIN`, `set_config`, `body` or `COMMIT` threw.
    @discardableResult
    public func transaction<T>(
        isolation: IsolationLevel = .readCommitted, settings: [(String, String)] = [],
        lazyBegin: Bool = false, _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        let startTrips = roundTrips, startStatements = statementsSent
        var committed = false
        defer {
            PostgresInstrumentation.report(
                PostgresTransactionReport(
                    roundTrips: roundTrips - startTrips, statements: statementsSent - startStatements, settings: settings, label: transactionLabel,
                    committed: committed))
            transactionLabel = nil
            pendingBegin = nil
            pendingSettings = []
            committedInPipeline = false
        }
        var begin = [PostgresStatement("BEGIN ISOLATION LEVEL " + isolation.sql)]
        if !settings.isEmpty { begin.append(.localSettings(settings)) }  // one statement for all of them
        lastError = nil
        committedInPipeline = false
        beginFailedOnConnection = false
        if lazyBegin {
            pendingBegin = begin
            pendingSettings = settings
        } else {
            try execute(begin[0].sql)
        }
        do {
            if !lazyBegin, begin.count > 1 { try query(begin[1].sql, begin[1].params) }
            let result = try body(self)
            if pendingBegin != nil {  // nothing was sent: no transaction to commit
                pendingBegin = nil
                committed = true
                return result
            }
            if committedInPipeline {
                committed = true
                return result
            }
            if transactionStatus == PQTRANS_INERROR {
                throw lastError ?? PostgresError(kind: .query, message: "transaction was aborted by an earlier error")
            }
            try execute("COMMIT")
            committed = true
            return result
        } catch {
            pendingBegin = nil
            rollbackQuietly()
            throw error
        }
    }

    /// Adds `settings` (transaction-local, like `SET LOCAL`) to the one `set_config` statement
    /// that a lazily begun transaction sends in front of its first statement, so they cost no
    /// statement of their own (docs/write-path.md "Round trips"). Returns false, and adds
    /// nothing, when there is no such pending `BEGIN`: the transaction was not begun lazily or
    /// has sent its first statement already; the caller then sends the settings itself.
    public func addPendingSettings(_ settings: [(String, String)]) -> Bool {
        guard var begin = pendingBegin, !settings.isEmpty else { return false }
        pendingSettings += settings
        let statement = PostgresStatement.localSettings(pendingSettings)
        if begin.count > 1 { begin[1] = statement } else { begin.append(statement) }
        pendingBegin = begin
        return true
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
