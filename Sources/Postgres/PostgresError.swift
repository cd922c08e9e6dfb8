/// An error from the PostgreSQL layer: connecting, running a statement, waiting for a pooled
/// connection, decoding a column, or using a closed pool or connection.
///
/// `message` carries the server's or libpq's text. It may contain table names, values or other
/// internals: fine for logs, never for API clients (ARCHITECTURE.md, "Errors are typed and mapped
/// once").
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, coarsely.
    public enum Kind: Sendable {
        /// Could not connect, or the connection broke (server gone, backend terminated,
        /// SQLSTATE class 08 or 57P01–57P03). The connection is unusable afterwards.
        case connection
        /// The server rejected a statement (syntax, constraint, serialization failure, …);
        /// the connection itself is still usable (after ROLLBACK when inside a transaction).
        case query
        /// `PostgresPool` found no free connection within `acquireTimeoutSeconds`.
        case poolTimeout
        /// A column was missing, NULL where a value was required, or not in the expected text format.
        case decoding
        /// The pool or connection was closed before the call.
        case closed
    }

    /// What went wrong, coarsely.
    public let kind: Kind
    /// The five-character SQLSTATE the server reported (for example `"23505"`), or nil when the
    /// error did not come from the server.
    public let sqlState: String?
    /// The constraint named by the server (`PG_DIAG_CONSTRAINT_NAME`), when present.
    public let constraint: String?
    /// Server or libpq message; safe for logs, never for clients.
    public let message: String

    /// Creates an error. Mostly used inside this module; public so that callers and test doubles
    /// can build the same errors.
    public init(kind: Kind, message: String, sqlState: String? = nil, constraint: String? = nil) {
        self.kind = kind
        self.message = message
        self.sqlState = sqlState
        self.constraint = constraint
    }

    /// True for SQLSTATE 40001 (serialization_failure) and 40P01 (deadlock_detected): the
    /// transaction may succeed when run again from the start.
    public var isSerializationFailure: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// True for SQLSTATE 23505 (unique_violation); `constraint` names the index.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// `PostgresError(kind, sqlState X, constraint Y): message`, for logs.
    public var description: String {
        var parts = ["\(kind)"]
        if let sqlState { parts.append("sqlState \(sqlState)") }
        if let constraint { parts.append("constraint \(constraint)") }
        return "PostgresError(\(parts.joined(separator: ", "))): \(message)"
    }
}
