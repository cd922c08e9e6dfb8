import CLibPQ
import Foundation

/// One statement of a pipeline: SQL with `$n` placeholders and one value per placeholder.
public struct PostgresStatement {
    /// A single statement; placeholders `$1`, `$2`, …
    public let sql: String
    /// One value per placeholder; nil (or a nil Optional) binds SQL NULL.
    public let params: [(any PostgresBindable)?]

    /// A statement and its parameters.
    public init(_ sql: String, _ params: [(any PostgresBindable)?] = []) {
        self.sql = sql
        self.params = params
    }

    /// One statement setting every `(name, value)` of `settings` for the rest of the
    /// transaction (`SELECT set_config($1, $2, true), …`, like `SET LOCAL`; PostgreSQL
    /// "Configuration Settings Functions"). `settings` must not be empty.
    public static func localSettings(_ settings: [(String, String)]) -> PostgresStatement {
        let n = settings.count
        let sql = n < localSettingsTexts.count ? localSettingsTexts[n] : localSettingsText(n)
        return PostgresStatement(sql, settings.flatMap { [$0.0, $0.1] as [(any PostgresBindable)?] })
    }

    /// `localSettings`' SQL for `n` settings.
    static func localSettingsText(_ n: Int) -> String {
        "SELECT " + (0..<n).map { "set_config($\($0 * 2 + 1), $\($0 * 2 + 2), true)" }.joined(separator: ", ")
    }

    /// `localSettingsText` for 0…16 settings, built once (every write sends one).
    private static let localSettingsTexts = (0...16).map(localSettingsText)

    /// One statement that runs `parts` — data-modifying statements (INSERT, UPDATE or DELETE,
    /// with or without RETURNING) — as the common table expressions `w0`, `w1`, … of one
    /// `WITH` query whose result is `select` (which may read the RETURNING rows of any `wN`).
    /// The server then starts, runs and ends one statement instead of several. Every part sees
    /// the snapshot the statement started with and none sees another's changes, in an order
    /// the server chooses (PostgreSQL documentation, "Data-Modifying Statements in WITH"), so
    /// combine only parts that read none of each other's rows and cannot conflict with each
    /// other. Each part's placeholders are renumbered after the previous parts'; a part must
    /// use `$` only in placeholders (no dollar quoting).
    /// The text is built once per shape (`CombinedTexts`): a write sends the same few shapes
    /// again and again.
    public static func combined(_ parts: [PostgresStatement], select: String) -> PostgresStatement {
        let sql = CombinedTexts.shared.text(parts.map { $0.sql }, parts.map { $0.params.count }, select) {
            var sql = "WITH "
            var count = 0
            for (i, part) in parts.enumerated() {
                if i > 0 { sql += ", " }
                sql += "w\(i) AS (" + renumbered(part.sql, by: count) + ")"
                count += part.params.count
            }
            return sql + " " + select
        }
        var params: [(any PostgresBindable)?] = []
        params.reserveCapacity(parts.reduce(0) { $0 + $1.params.count })
        for part in parts { params += part.params }
        return PostgresStatement(sql, params)
    }

    /// `sql` with every placeholder `$n` replaced by `$(n + offset)` (a scan of its UTF-8
    /// bytes: it runs for every combined statement a write sends).
    static func renumbered(_ sql: String, by offset: Int) -> String {
        guard offset > 0 else { return sql }
        let bytes = Array(sql.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 16)
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            i += 1
            guard b == UInt8(ascii: "$") else {
                out.append(b)
                continue
            }
            var n = 0
            let start = i
            while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") {
                n = n * 10 + Int(bytes[i] - UInt8(ascii: "0"))
                i += 1
            }
            precondition(i > start, "a `$` that is no placeholder in a combined statement")
            out.append(UInt8(ascii: "$"))
            out += Array(String(n + offset).utf8)
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The texts of combined statements (`PostgresStatement.combined`), each built once: keyed by
/// the UTF-8 lengths of the parts' texts and of the final `select` and by the parts' parameter
/// counts (which decide the renumbering; cheap to hash: a Swift string knows its length), and
/// used only when every text equals the entry's byte for byte and every count is the same, so
/// two shapes with equal keys can only replace each other's entry, never be mixed up. At most
/// `capacity` entries: further shapes are built every time.
final class CombinedTexts: @unchecked Sendable {
    private struct Entry {
        let parts: [String]
        let counts: [Int]
        let select: String
        let sql: String

        func matches(_ parts: [String], _ counts: [Int], _ select: String) -> Bool {
            counts == self.counts && CombinedTexts.sameBytes(select, self.select)
                && parts.indices.allSatisfy { CombinedTexts.sameBytes(parts[$0], self.parts[$0]) }
        }
    }

    /// Whether `a` and `b` hold the same UTF-8 bytes (not Unicode equivalence, which `==`
    /// tests): one `memcmp` of their contiguous storage, or nothing when both share it (a
    /// part's text is usually the same constant every time).
    static func sameBytes(_ a: String, _ b: String) -> Bool {
        var a = a
        var b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                guard x.count == y.count else { return false }
                guard let p = x.baseAddress, let q = y.baseAddress, p != q else { return true }
                return memcmp(p, q, x.count) == 0
            }
        }
    }

    /// The process's cache.
    static let shared = CombinedTexts()
    /// Entries kept at most.
    static let capacity = 256
    private let lock = NSLock()
    private var entries: [[Int]: Entry] = [:]

    /// The combined text of `parts` (with `counts` parameters each) and `select`, from the
    /// cache or from `build`.
    func text(_ parts: [String], _ counts: [Int], _ select: String, build: () -> String) -> String {
        var key = parts.map(\.utf8.count)
        key.append(select.utf8.count)
        key += counts
        lock.lock()
        let cached = entries[key]
        lock.unlock()
        if let cached, cached.matches(parts, counts, select) { return cached.sql }
        let sql = build()
        lock.lock()
        if cached != nil || entries.count < Self.capacity {
            entries[key] = Entry(parts: parts, counts: counts, select: select, sql: sql)
        }
        lock.unlock()
        return sql
    }
}

/// What one statement of a pipeline returned: its rows (empty for commands) and the number of
/// rows it affected (`PQcmdTuples`, 0 where the server reports none).
public struct PostgresResult: Sendable {
    /// Result rows in order.
    public let rows: [PostgresRow]
    /// Rows affected (INSERT/UPDATE/DELETE/SELECT count).
    public let affected: Int
}

/// The results of a pipeline, one per statement, in the order sent. When a statement failed,
/// `failure` names it and the results of the statements after it are absent (the server
/// skipped them); the results before it are in `results`.
public struct PostgresPipelineOutcome {
    /// Results of the statements that ran, in order (all of them when `failure` is nil).
    public let results: [PostgresResult]
    /// The first failing statement (its index in the pipeline) and its error.
    public let failure: (index: Int, error: PostgresError)?

    /// All results, or the first failure's error thrown.
    public func get() throws -> [PostgresResult] {
        if let failure { throw failure.error }
        return results
    }
}

extension PostgresConnection {
    /// `query(statement.sql, statement.params)`.
    @discardableResult
    public func query(_ statement: PostgresStatement) throws -> [PostgresRow] {
        try query(statement.sql, statement.params)
    }

    /// Most named prepared statements kept per session (cached by statement text); statements
    /// beyond it run unnamed.
    static let preparedCacheLimit = 512

    /// Sends `statements` to the server in ONE round trip using libpq pipeline mode
    /// (`PQenterPipelineMode`, `PQsendQueryPrepared`, `PQpipelineSync`; PostgreSQL 14+ protocol,
    /// libpq "Pipeline Mode" chapter) and reads every result. Each statement text is prepared
    /// once per session (`PQsendPrepare` inside the same pipeline the first time) and then
    /// executed by name, so later pipelines skip parsing and planning.
    ///
    /// Statements run in order; the server stops at the first error and skips the rest up to
    /// the sync (inside an explicit transaction, that transaction is then aborted). A lazily
    /// begun transaction (`transaction(..., lazyBegin: true)`) sends its `BEGIN` and settings
    /// as the first statements of the first pipeline or query, so they cost no round trip of
    /// their own. With `commit: true` a `COMMIT` is sent as the last statement and the
    /// enclosing `transaction` does not send another.
    ///
    /// - Returns: one result per statement up to the first failure, and that failure.
    /// - Throws: `PostgresError` `.connection` when the connection broke (or is in a state where
    ///   pipeline mode cannot start), `.query` for NUL bytes or too many parameters, `.closed`
    ///   after `close()`; server errors of a statement come back in the outcome instead.
    public func pipeline(_ statements: [PostgresStatement], commit: Bool = false) throws -> PostgresPipelineOutcome {
        var all = takePendingBegin()
        let offset = all.count
        all += statements
        if commit { all.append(PostgresStatement("COMMIT")) }
        let outcome: PostgresPipelineOutcome
        do {
            outcome = try runPipeline(all)
        } catch let e as PostgresError where e.kind == .connection && offset > 0 {
            beginFailedOnConnection = true  // a stale pooled session: the pool may retry on a fresh one
            throw e
        }
        if commit, outcome.failure == nil { committedInPipeline = true }
        if let f = outcome.failure {
            lastError = f.error
            if f.index < offset {  // BEGIN or a setting failed: report it as the first statement's failure
                return PostgresPipelineOutcome(results: [], failure: (0, f.error))
            }
            return PostgresPipelineOutcome(results: Array(outcome.results.dropFirst(offset)), failure: (f.index - offset, f.error))
        }
        return PostgresPipelineOutcome(results: Array(outcome.results.dropFirst(offset).prefix(statements.count)), failure: nil)
    }

    /// The statements of a lazily begun transaction not sent yet (nil-ed once taken); the
    /// transaction counts as started from here on.
    func takePendingBegin() -> [PostgresStatement] {
        guard let p = pendingBegin else { return [] }
        pendingBegin = nil
        pendingSettings = []
        return p
    }

    private func runPipeline(_ statements: [PostgresStatement]) throws -> PostgresPipelineOutcome {
        let conn = try openHandle()
        guard !statements.isEmpty else { return PostgresPipelineOutcome(results: [], failure: nil) }
        for s in statements {
            guard s.params.count <= 65_535 else { throw PostgresError(kind: .query, message: "too many parameters (\(s.params.count) > 65535)") }
        }
        let texts: [[String?]] = statements.map { $0.params.map { $0?.postgresText ?? nil } }
        let cStrings = texts.map { $0.map { $0.flatMap { strdup($0) } } }
        defer { for list in cStrings { for s in list { free(s) } } }
        // A text already prepared on this session was checked when it was prepared (the cache
        // is keyed by the text), so only new texts are scanned for NUL; parameters always are.
        let cached = statements.map { preparedNames[$0.sql] }
        let nulInParameter = try zip(texts, cStrings).contains(where: { try Self.containsNUL($0.0, $0.1) })
        if nulInParameter || statements.indices.contains(where: { cached[$0] == nil && statements[$0].sql.utf8.contains(0) }) {
            throw PostgresError(kind: .query, message: "SQL text or a parameter contains a NUL byte")
        }
        guard PQenterPipelineMode(conn) == 1 else {
            throw PostgresError(kind: .connection, message: "cannot enter pipeline mode: " + Self.trimmed(PQerrorMessage(conn)))
        }
        roundTrips += 1
        statementsSent += statements.count
        // What each queued command is: a prepare of statement i (cache it on success) or statement i itself.
        enum Command {
            case prepare(Int, PreparedStatement)
            case run(Int, PreparedStatement?)
        }
        var commands: [Command] = []
        var newNames: [String: PreparedStatement] = [:]
        var sendFailed = false
        for (i, s) in statements.enumerated() {
            var prepared = cached[i] ?? newNames[s.sql]
            if prepared == nil, !s.params.isEmpty, preparedNames.count + newNames.count < Self.preparedCacheLimit {
                let p = PreparedStatement(name: "lr_\(preparedNames.count + newNames.count)")
                guard PQsendPrepare(conn, p.name, s.sql, 0, nil) == 1 else { sendFailed = true; break }
                commands.append(.prepare(i, p))
                newNames[s.sql] = p
                prepared = p
            }
            let pointers = cStrings[i].map { $0.map { UnsafePointer($0) } }
            let ok = pointers.withUnsafeBufferPointer { buffer -> Int32 in
                if let prepared { return PQsendQueryPrepared(conn, prepared.name, Int32(buffer.count), buffer.baseAddress, nil, nil, 0) }
                return PQsendQueryParams(conn, s.sql, Int32(buffer.count), nil, buffer.baseAddress, nil, nil, 0)
            }
            guard ok == 1 else { sendFailed = true; break }
            commands.append(.run(i, prepared))
        }
        guard !sendFailed, PQpipelineSync(conn) == 1 else {
            // libpq could not queue or flush: the session is unusable mid-pipeline; drop it
            // (the pool discards a closed connection).
            let error = PostgresError(kind: .connection, message: Self.trimmed(PQerrorMessage(conn)))
            lastError = error
            close()
            throw error
        }
        var results: [PostgresResult] = []
        var failure: (index: Int, error: PostgresError)?
        var next = 0
        var nulls = 0
        // Results arrive as: one result per command followed by NULL, then PGRES_PIPELINE_SYNC.
        while true {
            guard let res = PQgetResult(conn) else {
                nulls += 1
                if nulls > 1 || PQstatus(conn) != CONNECTION_OK {
                    let error = PostgresError(
                        kind: .connection,
                        message: Self.trimmed(PQerrorMessage(conn)).isEmpty
                            ? "connection lost during a pipeline" : Self.trimmed(PQerrorMessage(conn)))
                    lastError = error
                    close()
                    throw error
                }
                continue
            }
            nulls = 0
            defer { PQclear(res) }
            let status = PQresultStatus(res)
            if status == PGRES_PIPELINE_SYNC { break }
            guard next < commands.count else { continue }
            let command = commands[next]
            next += 1
            switch (command, status) {
            case (.prepare(let i, let prepared), PGRES_COMMAND_OK):
                preparedNames[statements[i].sql] = prepared
            case (.run(_, let prepared), PGRES_COMMAND_OK), (.run(_, let prepared), PGRES_TUPLES_OK), (.run(_, let prepared), PGRES_EMPTY_QUERY):
                results.append(PostgresResult(rows: Self.rows(of: res, statement: prepared), affected: Int(String(cString: PQcmdTuples(res))) ?? 0))
            case (.prepare(let i, _), PGRES_PIPELINE_ABORTED), (.run(let i, _), PGRES_PIPELINE_ABORTED):
                if failure == nil { failure = (i, PostgresError(kind: .query, message: "statement skipped: the pipeline was aborted")) }
            case (.prepare(let i, _), _), (.run(let i, _), _):
                if failure == nil { failure = (i, makeError(res, conn)) }
            }
        }
        PQexitPipelineMode(conn)
        if let f = failure, f.error.kind == .connection { lastError = f.error; throw f.error }
        return PostgresPipelineOutcome(results: results, failure: failure)
    }
}
