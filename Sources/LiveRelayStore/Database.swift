import Foundation
import Postgres
import Locking

/// The one door to PostgreSQL for the product: every transaction declares whose rows it may
/// see, so row-level security (migration 0001) is a second wall behind the `tenant_id`
/// filter that every statement also carries (docs/configuration.md, ARCHITECTURE "SQL only in Store").
public final class Database: Sendable {
    /// The shared connection pool.
    public let pool: PostgresPool

    let notifier: Notifier
    private let commitObservers = Locked<[@Sendable ([(channel: String, payload: String)], Date) -> Void]>([])
    /// Transaction-local settings added to every transaction (e.g. `PriorityBudgetSQL.settings`:
    /// the deployment's default budgets, read by SQL that builds event objects).
    public let settings: [(String, String)]
    /// The dispatcher of this process that takes claims at commit, if any (docs/delivery.md
    /// "Claims at commit").
    public let commitClaims = CommitClaimRegistry()

    /// - Parameter settings: `(name, value)` pairs set (`SET LOCAL`) in every transaction.
    public init(pool: PostgresPool, settings: [(String, String)] = []) {
        self.pool = pool
        self.notifier = Notifier(conninfo: pool.conninfo)
        self.settings = settings
    }

    /// Runs `body` in a transaction that sees only `tenantId`'s rows
    /// (`set_config('app.tenant_id', tenantId, true)`, i.e. SET LOCAL).
    /// Retries on serialization failure/deadlock (see `PostgresPool.transaction`).
    public func tenant<T>(
        _ tenantId: String, isolation: IsolationLevel = .readCommitted,
        _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        try run(
            isolation: isolation,
            settings: [
                ("app.tenant_id", tenantId), ("lock_timeout", Database.lockTimeout),
                ("statement_timeout", Database.statementTimeout)
            ] + settings, body)
    }

    /// Runs `body` in a transaction of the system scope (`app.scope = 'system'`): credential
    /// lookup before the tenant is known, operator endpoints, maintenance and dispatch.
    /// Every statement inside must still name the tenant where it touches one tenant's rows.
    /// - Parameter local: further `(name, value)` settings of this transaction only (SET LOCAL,
    ///   sent with its `BEGIN`, so they cost no round trip), e.g. `DispatchStore.claimSettings`.
    ///   Planner and similar settings only: the scope, the timeouts and the role cannot be set
    ///   this way (a precondition; `Database.protectedSettings`).
    public func system<T>(
        isolation: IsolationLevel = .readCommitted, settings local: [(String, String)] = [],
        _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        precondition(
            local.allSatisfy { !Database.isProtected($0.0) }, "Database.system(settings:) may not set the scope, timeouts or role")
        return try run(
            isolation: isolation,
            settings: [
                ("app.scope", "system"), ("lock_timeout", Database.lockTimeout),
                ("statement_timeout", Database.statementTimeout)
            ] + settings + local, body)
    }

    /// Runs the transaction with NOTIFYs deferred, then queues them for the notifier, which
    /// sends them after COMMIT in its own `synchronous_commit = off` transaction (see
    /// `PostgresConnection.deferNotifications`). `BEGIN` and the settings travel with the body's
    /// first statement (`lazyBegin`), so they cost no round trip of their own.
    /// Notifications are wake-up hints: every listener re-checks the database, so one lost to
    /// a crash between the two commits costs at most a poll interval, never correctness.
    ///
    /// Transaction hooks (`PostgresConnection.addTransactionHook`, e.g. a claim at commit,
    /// docs/delivery.md "Claims at commit") run once the outcome is known: `committed` after
    /// COMMIT returned (before the commit observers), `rolledBack` when the body threw or
    /// COMMIT failed, including each attempt the pool runs again.
    func run<T>(isolation: IsolationLevel, settings: [(String, String)], _ body: (PostgresConnection) throws -> T) throws -> T {
        var pending: [(channel: String, payload: String)] = []
        var hooks: [TransactionHook] = []
        let result: T
        do {
            result = try pool.transaction(isolation: isolation, settings: settings, lazyBegin: true) { c in
                for h in hooks { h.rolledBack() }  // an earlier attempt whose COMMIT failed
                hooks = []
                c.deferNotifications()
                for h in c.takeTransactionHooks() { h.rolledBack() }  // left by a use outside this method: never committed here
                do {
                    let v = try body(c)
                    pending = c.takeDeferredNotifications()
                    hooks = c.takeTransactionHooks()
                    return v
                } catch {
                    _ = c.takeDeferredNotifications()
                    for h in c.takeTransactionHooks() { h.rolledBack() }
                    throw error
                }
            }
        } catch {
            for h in hooks { h.rolledBack() }
            throw error
        }
        if !hooks.isEmpty {
            let committedAt = Date()
            for h in hooks { h.committed(committedAt) }
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
    /// Settings a caller's transaction settings may not change (`system(settings:)`): the
    /// tenant scope (`app.*`), the timeouts and anything that changes who the session is.
    public static let protectedSettings: Set<String> = [
        "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout", "role", "session_authorization", "row_security"
    ]
    /// Whether `name` is one of `protectedSettings` or under `app.` (case-insensitive, as
    /// PostgreSQL treats setting names).
    static func isProtected(_ name: String) -> Bool {
        let n = name.lowercased()
        return n.hasPrefix("app.") || protectedSettings.contains(n)
    }

    /// How long any one statement of a transaction may run before PostgreSQL cancels it
    /// (`statement_timeout`, SQLSTATE 57014; set locally in every transaction): a runaway
    /// query costs one request an error instead of holding a connection and its locks
    /// (docs/security.md "Database").
    public static let statementTimeout = "30s"

    /// Queues `list` for the notifier thread, which sends it (coalesced with other requests'
    /// notifications, duplicates dropped, the ids of `OperationStore.eventsChannel` packed
    /// into space-separated payloads: `Notifier.packed`) on a dedicated session with `synchronous_commit = off`;
    /// a failure is retried once, then ignored (the notifications are hints, see `run`).
    /// Returns at once.
    public func sendNotifications(_ list: [(channel: String, payload: String)]) {
        notifier.send(list)
    }

    /// Waits (at most `timeoutSeconds`) until every queued notification was sent or dropped.
    public func flushNotifications(timeoutSeconds: Double = 5) {
        notifier.flush(timeoutSeconds: timeoutSeconds)
    }
}

/// Keyset pagination over time-ordered ids (docs/http-conventions.md lists): the cursor is the opaque
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

    /// One page of a tenant's rows of `table` in ascending `id` order, after cursor id `after`:
    /// fetches `limit + 1` rows (`columns`, decoded by `decode`) and builds the page with `from`.
    /// `table` and `columns` are SQL text of this module, never input; the values are bound.
    static func ascendingById(
        _ c: PostgresConnection, table: String, columns: String, tenantId: String, after: String?, limit: Int,
        id: (T) -> String, decode: (PostgresRow) throws -> T
    ) throws -> Page<T> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("id > ?", ifPresent: after)
        let rows = try c.query("SELECT \(columns) FROM \(table) WHERE \(w.clause) ORDER BY id LIMIT \(w.bind(limit + 1))", w.params).map(decode)
        return from(rows, limit: limit, id: id)
    }

    /// One page of a tenant's rows of `table` whose `parentColumn` is `parentId`, newest first
    /// (descending `id`, before cursor id `before`): fetches `limit + 1` rows (`columns`, decoded
    /// by `decode`). `table`, `parentColumn` and `columns` are SQL text of this module, never
    /// input; the values are bound.
    static func descendingById(
        _ c: PostgresConnection, table: String, columns: String, tenantId: String, parentColumn: String, parentId: String,
        before: String?, limit: Int, id: (T) -> String, decode: (PostgresRow) throws -> T
    ) throws -> Page<T> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("\(parentColumn) = ?", parentId)
        w.add("id < ?", ifPresent: before)
        let rows = try c.query(
            "SELECT \(columns) FROM \(table) WHERE \(w.clause) ORDER BY id DESC LIMIT \(w.bind(limit + 1))", w.params
        ).map(decode)
        return from(rows, limit: limit, id: id)
    }

    /// Builds a page from `limit + 1` fetched rows: the extra row only says another page exists.
    public static func from(_ rows: [T], limit: Int, id: (T) -> String) -> Page<T> {
        if rows.count > limit {
            let items = Array(rows.prefix(limit))
            return Page(items: items, nextCursor: items.last.map { Cursor.encode(id($0)) })
        }
        return Page(items: rows, nextCursor: nil)
    }
}

/// Sends post-commit notifications off the request thread (docs/write-path.md "Notifications").
///
/// `send` only queues: duplicates of a (channel, payload) already waiting are dropped, and one
/// worker thread sends everything waiting in one statement (`SELECT pg_notify(…), …`, at most
/// 100 a statement) on its own session with `synchronous_commit = off`, so notifications of
/// many concurrent requests coalesce into few commits. A failed send is retried once on a fresh
/// session, then dropped (they are wake-up hints; every listener re-checks the database). The
/// worker closes its session and ends after one idle second, and starts again on the next send.
///
/// `@unchecked Sendable`: `pending`, `running` and `conn` are only touched under `condition`
/// (`conn` only by the single worker thread, which exists at most once: `running`).
final class Notifier: @unchecked Sendable {
    let conninfo: String
    private let condition = NSCondition()
    private var pending: [(channel: String, payload: String)] = []
    private var pendingSet = Set<String>()
    private var running = false

    init(conninfo: String) { self.conninfo = conninfo }

    /// Queues `list` for the worker; returns at once.
    func send(_ list: [(channel: String, payload: String)]) {
        guard !list.isEmpty else { return }
        condition.lock()
        for n in list where pendingSet.insert(n.channel + "\u{0}" + n.payload).inserted {
            pending.append(n)
        }
        if !running {
            running = true
            let t = Thread { [self] in self.work() }
            t.name = "liverelay-notifier"
            t.start()
        }
        condition.signal()
        condition.unlock()
    }

    /// Blocks until everything queued so far was sent or dropped (tests), at most `timeoutSeconds`.
    func flush(timeoutSeconds: Double = 5) {
        let deadline = Date(timeIntervalSinceNow: timeoutSeconds)
        condition.lock()
        while (!pending.isEmpty || busy) && Date() < deadline { _ = condition.wait(until: min(deadline, Date(timeIntervalSinceNow: 0.01))) }
        condition.unlock()
    }

    private var busy = false

    /// Channels whose listeners split a payload on spaces (`OperationStore.eventsChannel`:
    /// `EventWaiter` wakes each id of it). Their notifications are packed.
    static let packedChannels: Set<String> = [OperationStore.eventsChannel]

    /// Longest packed payload, bytes (PostgreSQL's limit is 8,000).
    static let packedPayloadBytes = 7_000

    /// `list` with the notifications of each `packedChannels` channel joined, in order, into
    /// space-separated payloads of at most `packedPayloadBytes` bytes (a payload of
    /// `packedPayloadBytes` bytes or more on its own, or one with a space, stays alone); other
    /// channels as they are. An applied fan-out push notified its operation and its target one
    /// by one: 200,000 `pg_notify` calls, and as many messages for every listener, per
    /// 100,000-member wave.
    static func packed(_ list: [(channel: String, payload: String)]) -> [(channel: String, payload: String)] {
        var out: [(channel: String, payload: String)] = []
        var open: [String: Int] = [:]  // channel → index in `out` of its payload being filled
        for n in list {
            let bytes = n.payload.utf8.count
            guard packedChannels.contains(n.channel), bytes < packedPayloadBytes, !n.payload.utf8.contains(0x20) else {
                out.append(n)
                continue
            }
            if let i = open[n.channel], out[i].payload.utf8.count + 1 + bytes <= packedPayloadBytes {
                out[i].payload += " " + n.payload
            } else {
                open[n.channel] = out.count
                out.append(n)
            }
        }
        return out
    }

    private func work() {
        var conn: PostgresConnection?
        defer { conn?.close() }
        condition.lock()
        while true {
            if pending.isEmpty {
                if !condition.wait(until: Date(timeIntervalSinceNow: 1)) && pending.isEmpty {
                    running = false
                    condition.unlock()
                    return
                }
                continue
            }
            // Up to 5,000 at a time, packed, then sent 100 `pg_notify` calls per statement.
            let taken = Array(pending.prefix(5_000))
            pending.removeFirst(taken.count)
            for n in taken { pendingSet.remove(n.channel + "\u{0}" + n.payload) }
            let batch = Self.packed(taken)
            busy = true
            condition.unlock()
            var attempts = 0
            while attempts < 2 {  // the first try and one retry on a fresh session
                attempts += 1
                do {
                    if conn == nil {
                        let c = try PostgresConnection(conninfo, connectTimeoutSeconds: 2)
                        try c.execute("SET synchronous_commit = off")
                        conn = c
                    }
                    for start in stride(from: 0, to: batch.count, by: 100) {
                        let part = batch[start..<min(batch.count, start + 100)]
                        let calls = part.indices.map { "pg_notify($\(($0 - start) * 2 + 1), $\(($0 - start) * 2 + 2))" }.joined(separator: ", ")
                        try conn!.query("SELECT " + calls, part.flatMap { [$0.channel, $0.payload] as [(any PostgresBindable)?] })
                    }
                    break
                } catch {
                    conn?.close()
                    conn = nil
                }
            }
            condition.lock()
            busy = false
            condition.broadcast()
        }
    }
}
