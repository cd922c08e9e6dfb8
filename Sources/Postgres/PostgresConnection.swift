import CLibPQ
import CShims
import Foundation

/// One blocking libpq connection (`PGconn`).
///
/// Not thread-safe: use it from one thread at a time (`PostgresPool` hands each connection to
/// one caller at a time). All statements use the extended protocol with text-format parameters
/// and results, except `simpleQuery`. Every session runs with `TimeZone=UTC`, `DateStyle=ISO`,
/// `bytea_output=hex`, `jit=off`, `client_encoding=UTF8` and `application_name=liverelay` (a
/// conninfo that names its own `application_name` or `options` keeps them). JIT is off because
/// LiveRelay's statements are short: PostgreSQL compiles a plan whose estimated cost passes
/// `jit_above_cost`, and a dispatcher claim over a large queue spent 153 ms of its 506 ms
/// compiling (PostgreSQL manual, "When to JIT?").
public final class PostgresConnection {
    /// The libpq handle; nil once closed.
    private(set) var handle: OpaquePointer?
    /// Set by `listen(_:)`; the pool runs `UNLISTEN *` before reusing such a connection.
    var hasListened = false
    /// The last server error on this connection, to rethrow when a transaction was found aborted.
    var lastError: PostgresError?
    /// Notifications recorded while deferring (`deferNotifications()`); nil when not deferring.
    var deferred: [(channel: String, payload: String)]?
    /// `channel` + NUL + `payload` of each entry of `deferred` (duplicates dropped in O(1)).
    var deferredKeys: Set<String> = []
    /// Named prepared statements of this session by statement text (see `pipeline`), each
    /// with the column layout of its last result.
    var preparedNames: [String: PreparedStatement] = [:]
    /// `BEGIN` and settings of a lazily begun transaction, not sent yet.
    var pendingBegin: [PostgresStatement]?
    /// The settings of `pendingBegin`'s `set_config` statement (see `addPendingSettings`).
    var pendingSettings: [(String, String)] = []
    /// Set when a pipeline sent the transaction's `COMMIT` (`pipeline(_:commit: true)`).
    var committedInPipeline = false
    /// Set when the pipeline carrying a lazy `BEGIN` found the connection broken.
    var beginFailedOnConnection = false

    /// Network round trips this session made so far (each `PQexec*`/`PQprepare` call and each
    /// pipeline counts one): the measure behind the write path's round-trip budget
    /// (docs/write-path.md). Read it from the thread that uses the connection.
    public internal(set) var roundTrips = 0
    /// Statements this session sent so far (each `PQexec*` call and each statement of a
    /// pipeline, `BEGIN` and `COMMIT` included; prepares not counted): every statement costs the
    /// server an executor start-up whatever round trip it rides in (docs/write-path.md "Round
    /// trips"). Read it from the thread that uses the connection.
    public internal(set) var statementsSent = 0
    /// A free-form name of the current transaction's purpose (e.g. `"update"`), reported to the
    /// transaction observer (`PostgresInstrumentation`); cleared when the transaction ends.
    public var transactionLabel: String?
    /// Work the owner of the current transaction runs once it knows how the transaction ended
    /// (`addTransactionHook`, `takeTransactionHooks`): after COMMIT returned, or after a
    /// rollback or a failed COMMIT.
    var transactionHooks: [TransactionHook] = []

    /// Connects synchronously.
    ///
    /// - Parameters:
    ///   - conninfo: a libpq connection string, key/value (`host=… dbname=…`) or URI
    ///     (`postgresql:///db?host=/run/dir&user=u`).
    ///   - connectTimeoutSeconds: libpq `connect_timeout` in seconds (libpq treats 1 as 2; 0 waits forever).
    /// - Throws: `PostgresError(kind: .connection)` with libpq's message when the server is
    ///   unreachable or rejects the login.
    public init(_ conninfo: String, connectTimeoutSeconds: Int = 5) throws {
        // Keywords are processed in order and later ones win: the conninfo (expanded from
        // `dbname`) may override the application name and options, the explicit timeout wins.
        let params: [(String, String)] = [
            ("application_name", "liverelay"),
            ("client_encoding", "UTF8"),
            ("options", "-c TimeZone=UTC -c DateStyle=ISO,MDY -c bytea_output=hex -c jit=off"),
            ("dbname", conninfo),
            ("connect_timeout", String(connectTimeoutSeconds))
        ]
        let keys = params.map { strdup($0.0) }
        let values = params.map { strdup($0.1) }
        defer {
            for k in keys { free(k) }
            for v in values { free(v) }
        }
        let keyPointers = keys.map { UnsafePointer($0) } + [nil]
        let valuePointers = values.map { UnsafePointer($0) } + [nil]
        guard let conn = PQconnectdbParams(keyPointers, valuePointers, 1) else {
            throw PostgresError(kind: .connection, message: "libpq could not allocate a connection")
        }
        guard PQstatus(conn) == CONNECTION_OK else {
            let message = Self.trimmed(PQerrorMessage(conn))
            PQfinish(conn)
            throw PostgresError(kind: .connection, message: message)
        }
        // Notices (e.g. "relation already exists, skipping") would otherwise go to stderr.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        handle = conn
        // A conninfo with its own `options` replaces ours: enforce what the decoders rely on.
        if Self.parameter(conn, "TimeZone") != "UTC" || Self.parameter(conn, "DateStyle")?.hasPrefix("ISO") != true {
            do {
                try simpleQuery("SET TimeZone TO 'UTC'; SET DateStyle TO ISO, MDY; SET bytea_output TO hex")
            } catch {
                close()
                throw error
            }
        }
    }

    deinit {
        if let handle { PQfinish(handle) }
    }

    /// The server process id of this session (`pg_backend_pid()`), 0 when closed.
    public var backendPID: Int32 {
        guard let handle else { return 0 }
        return PQbackendPID(handle)
    }

    /// Runs one statement with text parameters `$1…$n` and returns its rows (empty for commands).
    ///
    /// - Parameters:
    ///   - sql: a single statement; placeholders `$1`, `$2`, …
    ///   - params: one value per placeholder; nil (or a nil Optional) binds SQL NULL.
    /// - Throws: `PostgresError` `.query` (with `sqlState`, `constraint`) when the server rejects
    ///   it, `.connection` when the connection broke, `.closed` after `close()`.
    @discardableResult
    public func query(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> [PostgresRow] {
        try withResult(sql, params).rows
    }

    /// Runs one statement and returns the number of rows it affected (`PQcmdTuples`; 0 for
    /// statements that report none, such as DDL). Throws as `query`.
    @discardableResult
    public func execute(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> Int {
        try withResult(sql, params).affected
    }

    /// Runs a script of one or more `;`-separated statements without parameters (simple query
    /// protocol), e.g. a migration file. Outside an explicit transaction the server runs the
    /// whole script in one implicit transaction. Results are discarded; throws as `query` for
    /// the first failing statement.
    public func simpleQuery(_ sql: String) throws {
        let conn = try openHandle()
        guard !sql.utf8.contains(0) else {
            throw PostgresError(kind: .query, message: "SQL text contains a NUL byte")
        }
        if pendingBegin != nil { _ = try pipeline([]).get() }
        roundTrips += 1
        statementsSent += 1
        try check(PQexec(conn, sql), conn).map { PQclear($0) }
    }

    /// True while the session is usable: libpq status OK and the protocol not stuck mid-command
    /// (`PQTRANS_ACTIVE`/`UNKNOWN`). An open or aborted transaction still counts as healthy,
    /// since ROLLBACK resets it. A backend killed while idle is only noticed on the next I/O.
    public var isHealthy: Bool {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { return false }
        let tx = PQtransactionStatus(handle)
        return tx == PQTRANS_IDLE || tx == PQTRANS_INTRANS || tx == PQTRANS_INERROR
    }

    /// Closes the session (idempotent). Later calls throw `PostgresError(kind: .closed)`.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    // MARK: - Internals

    /// The transaction status, nil when closed.
    var transactionStatus: PGTransactionStatusType? {
        guard let handle else { return nil }
        return PQtransactionStatus(handle)
    }

    func openHandle() throws -> OpaquePointer {
        guard let handle else { throw PostgresError(kind: .closed, message: "connection is closed") }
        return handle
    }

    private func withResult(_ sql: String, _ params: [(any PostgresBindable)?]) throws -> PostgresResult {
        let conn = try openHandle()
        if pendingBegin != nil {
            // A lazily begun transaction: BEGIN and its settings travel with this statement.
            return try pipeline([PostgresStatement(sql, params)]).get()[0]
        }
        guard params.count <= 65_535 else {
            throw PostgresError(kind: .query, message: "too many parameters (\(params.count) > 65535)")
        }
        let texts: [String?] = params.map { $0?.postgresText ?? nil }
        let cStrings = texts.map { $0.flatMap { strdup($0) } }
        defer { for s in cStrings { free(s) } }
        if try Self.containsNUL(texts, cStrings) || (preparedNames[sql] == nil && sql.utf8.contains(0)) {
            throw PostgresError(kind: .query, message: "SQL text or a parameter contains a NUL byte")
        }
        let pointers = cStrings.map { $0.map { UnsafePointer($0) } }
        // Parameterised statements are prepared once per session (cached by text, see `pipeline`).
        var prepared = preparedNames[sql]
        if prepared == nil, !params.isEmpty, preparedNames.count < Self.preparedCacheLimit {
            let p = PreparedStatement(name: "lr_\(preparedNames.count)")
            roundTrips += 1
            try check(PQprepare(conn, p.name, sql, 0, nil), conn).map { PQclear($0) }
            preparedNames[sql] = p
            prepared = p
        }
        roundTrips += 1
        statementsSent += 1
        let result = pointers.withUnsafeBufferPointer { buffer in
            if let prepared { return PQexecPrepared(conn, prepared.name, Int32(buffer.count), buffer.baseAddress, nil, nil, 0) }
            return PQexecParams(conn, sql, Int32(buffer.count), nil, buffer.baseAddress, nil, nil, 0)
        }
        guard let res = try check(result, conn) else {
            throw PostgresError(kind: .connection, message: "no result from server")
        }
        defer { PQclear(res) }
        return PostgresResult(rows: Self.rows(of: res, statement: prepared), affected: Int(String(cString: PQcmdTuples(res))) ?? 0)
    }

    /// Returns the successful result (caller clears it) or clears it and throws.
    @discardableResult
    private func check(_ result: OpaquePointer?, _ conn: OpaquePointer) throws -> OpaquePointer? {
        guard let res = result else {
            let error = PostgresError(kind: .connection, message: Self.trimmed(PQerrorMessage(conn)))
            lastError = error
            throw error
        }
        switch PQresultStatus(res) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return res
        default:
            let error = makeError(res, conn)
            PQclear(res)
            lastError = error
            throw error
        }
    }

    func makeError(_ res: OpaquePointer, _ conn: OpaquePointer) -> PostgresError {
        func field(_ code: Int32) -> String? {
            guard let p = PQresultErrorField(res, code) else { return nil }
            return String(cString: p)
        }
        let sqlState = field(cshim_pg_diag_sqlstate())
        var message = Self.trimmed(PQresultErrorMessage(res))
        if message.isEmpty { message = Self.trimmed(PQerrorMessage(conn)) }
        if message.isEmpty { message = "unexpected result status \(String(cString: PQresStatus(PQresultStatus(res))))" }
        let broken =
            PQstatus(conn) != CONNECTION_OK
            || sqlState?.hasPrefix("08") == true
            || ["57P01", "57P02", "57P03"].contains(sqlState ?? "")
        return PostgresError(
            kind: broken ? .connection : .query, message: message,
            sqlState: sqlState, constraint: field(cshim_pg_diag_constraint_name()))
    }

    /// The rows of `res`. With `statement` (the prepared statement `res` came from), its
    /// cached column layout is reused when the result has the same column names (a prepared
    /// statement's result columns change only if the schema under it does), and replaced
    /// otherwise; building a layout hashes every column name (docs/write-path.md "The API
    /// process").
    static func rows(of res: OpaquePointer, statement: PreparedStatement? = nil) -> [PostgresRow] {
        let rowCount = PQntuples(res)
        let fieldCount = PQnfields(res)
        let layout: PostgresColumnLayout
        if let cached = statement?.layout, cached.matches(res, fieldCount: fieldCount) {
            layout = cached
        } else {
            layout = PostgresColumnLayout((0..<fieldCount).map { String(cString: PQfname(res, $0)) })
            statement?.layout = layout
        }
        var rows: [PostgresRow] = []
        rows.reserveCapacity(Int(rowCount))
        for r in 0..<rowCount {
            let values: [String?] = (0..<fieldCount).map { c in
                PQgetisnull(res, r, c) == 1 ? nil : String(cString: PQgetvalue(res, r, c))
            }
            rows.append(PostgresRow(layout: layout, values: values))
        }
        return rows
    }

    /// True when a parameter holds a NUL byte, which a C string cannot carry: `cStrings[i]`
    /// (`strdup` of `texts[i]`) then ends before the text does. `strlen` scans with the C
    /// library's vector code; the text's UTF-8 count is stored for a native string.
    /// - Throws: `.query` when `strdup` could not copy a text (out of memory): it would
    ///   otherwise be sent as SQL NULL.
    static func containsNUL(_ texts: [String?], _ cStrings: [UnsafeMutablePointer<CChar>?]) throws -> Bool {
        for (text, c) in zip(texts, cStrings) {
            guard let text else { continue }
            guard let c else { throw PostgresError(kind: .query, message: "out of memory copying a parameter") }
            if strlen(c) != text.utf8.count { return true }
        }
        return false
    }

    private static func parameter(_ conn: OpaquePointer, _ name: String) -> String? {
        PQparameterStatus(conn, name).map { String(cString: $0) }
    }

    static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
