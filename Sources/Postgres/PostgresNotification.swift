/// One `NOTIFY` delivered to a session that ran `LISTEN`.
public struct PostgresNotification: Sendable, Equatable {
    /// The channel name, as given to `NOTIFY`/`pg_notify` (case preserved).
    public let channel: String
    /// The payload string; empty when none was given.
    public let payload: String
    /// Server process id of the notifying session.
    public let pid: Int32
}
