import Foundation

/// What to run once a transaction has ended: `committed` with the time COMMIT returned, or
/// `rolledBack` after a rollback or a failed COMMIT. Exactly one of them runs.
public struct TransactionHook: Sendable {
    /// Runs after COMMIT returned; the argument is that moment.
    public let committed: @Sendable (Date) -> Void
    /// Runs when the transaction did not commit (its body threw, or COMMIT failed).
    public let rolledBack: @Sendable () -> Void

    /// - Parameters:
    ///   - committed: called once after COMMIT returned, with the time it returned.
    ///   - rolledBack: called once when the transaction did not commit.
    public init(committed: @escaping @Sendable (Date) -> Void, rolledBack: @escaping @Sendable () -> Void) {
        self.committed = committed
        self.rolledBack = rolledBack
    }
}

extension PostgresConnection {
    /// Records `hook` for the current transaction. The code that owns the transaction (the
    /// product's `Database.run`) takes the hooks with `takeTransactionHooks()` when the body
    /// has run and calls exactly one side of each once it knows whether COMMIT succeeded; a
    /// connection used without such an owner never runs them.
    public func addTransactionHook(_ hook: TransactionHook) { transactionHooks.append(hook) }

    /// The hooks recorded since the last call, in order; the list is emptied.
    public func takeTransactionHooks() -> [TransactionHook] {
        let out = transactionHooks
        transactionHooks = []
        return out
    }
}
