import Foundation

/// What one finished transaction cost: its network round trips from `BEGIN` to `COMMIT` or
/// `ROLLBACK` (the rollback itself not counted), its settings (e.g. `app.tenant_id`) and label.
public struct PostgresTransactionReport: Sendable {
    /// Round trips made inside the transaction (see `PostgresConnection.roundTrips`).
    public let roundTrips: Int
    /// Statements sent inside the transaction, `BEGIN` and `COMMIT` included (see
    /// `PostgresConnection.statementsSent`).
    public let statements: Int
    /// The `set_config` settings the transaction was begun with, as given (settings the body
    /// added with `PostgresConnection.addPendingSettings` are not listed).
    public let settings: [(String, String)]
    /// `PostgresConnection.transactionLabel` as the body left it (nil when unset).
    public let label: String?
    /// Whether it committed (false: rolled back or failed).
    public let committed: Bool
}

/// A process-wide hook that sees every transaction's round-trip count, for tests that keep the
/// write path within its budget (docs/write-path.md "Round trips"). Without an observer a
/// transaction pays one uncontended lock.
public enum PostgresInstrumentation {
    nonisolated(unsafe) private static var observer: (@Sendable (PostgresTransactionReport) -> Void)?
    nonisolated(unsafe) private static var installed = false
    private static let lock = NSLock()

    /// Installs (or with nil removes) the observer, called on the transaction's own thread
    /// after it ended.
    public static func setObserver(_ f: (@Sendable (PostgresTransactionReport) -> Void)?) {
        lock.lock()
        observer = f
        installed = f != nil
        lock.unlock()
    }

    static func report(_ r: @autoclosure () -> PostgresTransactionReport) {
        lock.lock()
        let f = installed ? observer : nil
        lock.unlock()
        f?(r())
    }
}
