import Foundation
import Postgres
import Synchronization

/// The one door to PostgreSQL for the product: every transaction declares whose rows it may
/// see, so row-level security (migration 0001) is a second wall behind the `tenant_id`
/// filter that every statement also carries (SPEC §9, ARCHITECTURE "SQL only in Store").
public final class Database: Sendable {
    /// The shared connection pool.
    public let pool: PostgresPool

    let notifier: Notifier
    private let commitObservers = Mutex<[@Sendable ([(channel: String, payload: String)], Date) -> Void]>([])

    public init(pool: PostgresPool) {
        self.pool = pool
        self.notifier = Notifier(conninfo: pool.conninfo)
    }

    /// Runs `body` in a transaction that sees only `tenantId`'s rows
    /// (`set_config('app.tenant_id', tenantId, true)`, i.e. SET LOCAL).
    /// Retries on serialization failure/deadlock (see `PostgresPool.transaction`).
    public func tenant<T>(_ tenantId: String, isolation: IsolationLevel = .readCommitted,
                          _ body: (PostgresConnection) throws -> T) throws -> T {
        try run(isolation: isolation, settings: [("app.tenant_id", tenantId), ("lock_timeout", Database.lockTimeout)], body)
    }

    /// Runs `body` in a transaction of the system scope (`app.scope = 'system'`): credential
    /// lookup before the tenant is known, operator endpoints, maintenance and dispatch.
    /// Every statement inside must still name the tenant where it touches one tenant's rows.
    public func system<T>(isolation: IsolationLevel = .readCommitted, _ body: (PostgresConnection) throws -> T) throws -> T {
        try run(isolation: isolation, settings: [("app.scope", "system"), ("lock_timeout", Database.lockTimeout)], body)
    }

    /// Runs the transaction with NOTIFYs deferred, then sends them after COMMIT in their own
    /// `synchronous_commit = off` transaction (see `PostgresConnection.deferNotifications`).
    /// Notifications are wake-up hints: every listener re-checks the database, so one lost to
    /// a crash between the two commits costs at most a poll interval, never correctness.
    func run<T>(isolation: IsolationLevel, settings: [(String, String)], _ body: (PostgresConnection) throws -> T) throws -> T {
        var pending: [(channel: String, payload: String)] = []
        let result = try pool.transaction(isolation: isolation, settings: settings) { c in
            c.deferNotifications()
            do {
                let v = try body(c)
                pending = c.takeDeferredNotifications()
                return v
            } catch {
                _ = c.takeDeferredNotifications()
                throw error
            }
        }
        if !pending.isEmpty {
            let observers = commitObservers.withLock { $0 }
            if !observers.isEmpty {
                let committedAt = Date()
                for o in observers { o(pending, committedAt) }
            }
            sendNotifications(pending)
        }
        return result
    }

    /// Registers `observer`, called in this process right after each transaction of this
    /// `Database` that queued notifications has committed, with those notifications and the
    /// time COMMIT returned (docs/delivery.md "Wake-ups": a dispatcher in the same process
    /// wakes without the NOTIFY round trip and measures lag from the commit). Observers run on
    /// the committing thread before the NOTIFYs are sent: keep them short.
    public func addCommitObserver(_ observer: @escaping @Sendable ([(channel: String, payload: String)], Date) -> Void) {
        commitObservers.withLock { $0.append(observer) }
    }

    /// How long any statement waits for a row lock before failing with SQLSTATE 55P03
    /// (`lock_timeout`): a request that waited this long is answered with a retryable error
    /// instead of holding a pool connection indefinitely.
    public static let lockTimeout = "10s"

    /// Sends `list` as one statement on a dedicated session with `synchronous_commit = off`
    /// (the commit does not wait for the WAL flush); failures are ignored (the notifications
    /// are hints, see `run`).
    public func sendNotifications(_ list: [(channel: String, payload: String)]) {
        notifier.send(list)
    }
}

/// Keyset pagination over time-ordered ids (SPEC §3 lists): the cursor is the opaque
/// base64url of the last id of the previous page.
public enum Cursor {
    /// The opaque cursor for `lastId`.
    public static func encode(_ lastId: String) -> String {
        Data(("v1:" + lastId).utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The last id a cursor stands for; nil when the cursor was not made by `encode`.
    public static func decode(_ cursor: String) -> String? {
        var s = cursor.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        guard let d = Data(base64Encoded: s), let text = String(data: d, encoding: .utf8), text.hasPrefix("v1:") else { return nil }
        let id = String(text.dropFirst(3))
        return id.isEmpty || id.count > 64 ? nil : id
    }
}

/// One page of a list: rows plus the cursor of the next page (nil on the last page).
public struct Page<T: Sendable>: Sendable {
    public let items: [T]
    public let nextCursor: String?
    public init(items: [T], nextCursor: String?) { self.items = items; self.nextCursor = nextCursor }

    /// Builds a page from `limit + 1` fetched rows: the extra row only says another page exists.
    public static func from(_ rows: [T], limit: Int, id: (T) -> String) -> Page<T> {
        if rows.count > limit {
            let items = Array(rows.prefix(limit))
            return Page(items: items, nextCursor: items.last.map { Cursor.encode(id($0)) })
        }
        return Page(items: rows, nextCursor: nil)
    }
}

/// The session that sends post-commit notifications: one connection (made on first use,
/// remade after a failure), `synchronous_commit = off`, all of a batch in one statement.
final class Notifier: @unchecked Sendable {  // `conn` only under `lock`
    let conninfo: String
    private let lock = NSLock()
    private var conn: PostgresConnection?

    init(conninfo: String) { self.conninfo = conninfo }

    func send(_ list: [(channel: String, payload: String)]) {
        guard !list.isEmpty else { return }
        lock.lock()
        defer { lock.unlock() }
        do {
            if conn == nil {
                let c = try PostgresConnection(conninfo, connectTimeoutSeconds: 2)
                try c.execute("SET synchronous_commit = off")
                conn = c
            }
            let calls = list.indices.map { "pg_notify($\($0 * 2 + 1), $\($0 * 2 + 2))" }.joined(separator: ", ")
            try conn!.query("SELECT " + calls, list.flatMap { [$0.channel, $0.payload] as [(any PostgresBindable)?] })
        } catch {
            conn?.close()
            conn = nil
        }
    }

    deinit { conn?.close() }
}
