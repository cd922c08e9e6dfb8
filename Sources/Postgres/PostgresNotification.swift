/// One `NOTIFY` delivered to a session that ran `LISTEN`.
public struct PostgresNotification: Sendable, Equatable {
    /// The channel name, as given to `NOTIFY`/`pg_notify` (case preserved).
    public let channel: String
    /// The payload string; empty when none was given.
    public let payload: String
    /// Server process id of the notifying session.
    public let pid: Int32

    /// A notification; public so callers can build them in tests.
    public init(channel: String, payload: String, pid: Int32) {
        self.channel = channel
        self.payload = payload
        self.pid = pid
    }
}
