import CLibPQ
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension PostgresConnection {
    /// A listener's loop, on the calling thread until `isStopping()` returns true (checked at
    /// least every 0.25 s): opens a connection of its own to `conninfo`, `LISTEN`s on `channel`
    /// and calls `connected()` (notifications may have been missed before it), then `received`
    /// with each non-empty batch of notifications. When the connection fails it is closed,
    /// `lost(error)` is called and, unless stopping, the loop waits `retrySeconds` (seconds)
    /// before reconnecting. The connection is closed when the loop ends.
    public static func listenLoop(
        conninfo: String, channel: String, retrySeconds: Double = 1, isStopping: () -> Bool, connected: () -> Void = {},
        received: ([PostgresNotification]) -> Void, lost: (any Error) -> Void = { _ in }
    ) {
        var conn: PostgresConnection?
        while !isStopping() {
            do {
                if conn == nil {
                    let c = try PostgresConnection(conninfo)
                    try c.listen(channel)
                    conn = c
                    connected()
                }
                let batch = try conn!.waitForNotifications(timeoutSeconds: 0.25)
                if !batch.isEmpty { received(batch) }
            } catch {
                conn?.close()
                conn = nil
                lost(error)
                if !isStopping() { Thread.sleep(forTimeInterval: retrySeconds) }
            }
        }
        conn?.close()
    }

    /// `LISTEN "channel"`: subscribes this session to `channel` (exact, case-sensitive name;
    /// quoted as an identifier, so any characters are safe). Throws as `query`.
    public func listen(_ channel: String) throws {
        try execute("LISTEN " + Self.quoteIdentifier(channel))
        hasListened = true
    }

    /// `UNLISTEN "channel"`. Throws as `query`.
    public func unlisten(_ channel: String) throws {
        try execute("UNLISTEN " + Self.quoteIdentifier(channel))
    }

    /// `SELECT pg_notify($1, $2)`: sends `payload` (under 8000 bytes) to listeners of `channel`.
    /// Inside a transaction it is delivered at COMMIT. While `deferNotifications()` is in
    /// effect the notification is only recorded (duplicates once) for the caller to send after
    /// commit, see `takeDeferredNotifications()`. Throws as `query`.
    public func notify(_ channel: String, payload: String) throws {
        if deferred != nil {
            if deferredKeys.insert(channel + "\u{0}" + payload).inserted { deferred!.append((channel, payload)) }
            return
        }
        try query("SELECT pg_notify($1, $2)", [channel, payload])
    }

    /// From now on `notify` records instead of sending. Why: a transaction that NOTIFYs takes
    /// PostgreSQL's global notify lock at commit and holds it through the WAL flush, which
    /// serialises every notifying commit of the cluster; sending wake-up hints after commit
    /// in a tiny `synchronous_commit = off` transaction keeps commits concurrent.
    public func deferNotifications() { deferred = []; deferredKeys = [] }

    /// The notifications recorded since `deferNotifications()`, in order; stops deferring.
    public func takeDeferredNotifications() -> [(channel: String, payload: String)] {
        let out = deferred ?? []
        deferred = nil
        deferredKeys = []
        return out
    }

    /// Waits up to `timeoutSeconds` seconds for notifications on the channels this session
    /// listens to; returns those already buffered at once, the first batch to arrive, or `[]` on
    /// timeout. Uses `poll()` on the socket, `PQconsumeInput` and `PQnotifies`; never sends a
    /// query. Throws `PostgresError(kind: .connection)` when the server went away (backend
    /// terminated, restart), `.closed` after `close()`.
    public func waitForNotifications(timeoutSeconds: Double) throws -> [PostgresNotification] {
        let conn = try openHandle()
        var received = drainNotifications()
        if !received.isEmpty { return received }
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64((max(0, timeoutSeconds) * 1000).rounded(.up)))
        while true {
            let remaining = clock.now.duration(to: deadline)
            guard remaining > .zero else { return [] }
            let (secs, attos) = remaining.components
            let millis = Int32(clamping: secs * 1000 + attos / 1_000_000_000_000_000 + 1)
            let socket = PQsocket(conn)
            guard socket >= 0 else { throw brokenConnection(conn) }
            var pfd = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let rc = poll(&pfd, 1, millis)
            if rc < 0 {
                if errno == EINTR { continue }
                throw PostgresError(kind: .connection, message: "poll() failed: errno \(errno)")
            }
            if rc == 0 { continue }
            if pfd.revents & Int16(POLLNVAL) != 0 { throw brokenConnection(conn) }
            guard PQconsumeInput(conn) == 1, PQstatus(conn) == CONNECTION_OK else {
                throw brokenConnection(conn)
            }
            received = drainNotifications()
            if !received.isEmpty { return received }
        }
    }

    /// Everything `PQnotifies` has buffered, in arrival order.
    func drainNotifications() -> [PostgresNotification] {
        guard let handle else { return [] }
        var out: [PostgresNotification] = []
        while let note = PQnotifies(handle) {
            let n = note.pointee
            out.append(
                PostgresNotification(
                    channel: String(cString: n.relname),
                    payload: n.extra.map { String(cString: $0) } ?? "",
                    pid: n.be_pid))
            PQfreemem(note)
        }
        return out
    }

    /// True while an idle connection still looks alive: reads anything the server sent while
    /// idle (e.g. the FATAL of `pg_terminate_backend` and EOF) without blocking.
    func probeIdle() -> Bool {
        guard let conn = handle, PQstatus(conn) == CONNECTION_OK else { return false }
        for _ in 0..<4 {
            let socket = PQsocket(conn)
            guard socket >= 0 else { return false }
            var pfd = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let rc = poll(&pfd, 1, 0)
            if rc == 0 { return true }
            if rc < 0 { return errno == EINTR }
            if pfd.revents & Int16(POLLNVAL) != 0 { return false }
            if PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK { return false }
        }
        return PQstatus(conn) == CONNECTION_OK
    }

    /// `"name"` with embedded double quotes doubled (SQL identifier quoting).
    static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    private func brokenConnection(_ conn: OpaquePointer) -> PostgresError {
        let message = Self.trimmed(PQerrorMessage(conn))
        return PostgresError(kind: .connection, message: message.isEmpty ? "connection to server lost" : message)
    }
}
