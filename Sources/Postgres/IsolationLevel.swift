/// Transaction isolation level for `BEGIN ISOLATION LEVEL …`.
public enum IsolationLevel: Sendable {
    /// `READ COMMITTED`, PostgreSQL's default: each statement sees data committed before it began.
    case readCommitted
    /// `REPEATABLE READ`: one snapshot for the whole transaction; may fail with 40001.
    case repeatableRead
    /// `SERIALIZABLE`: as if transactions ran one at a time; conflicting ones fail with 40001.
    case serializable

    /// The SQL words after `ISOLATION LEVEL`.
    var sql: String {
        switch self {
        case .readCommitted: return "READ COMMITTED"
        case .repeatableRead: return "REPEATABLE READ"
        case .serializable: return "SERIALIZABLE"
        }
    }
}
