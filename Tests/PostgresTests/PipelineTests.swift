import Foundation
import Locking
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// libpq pipeline mode, the per-session prepared-statement cache, lazily begun transactions
/// and the round-trip counter, against a real PostgreSQL.
final class PipelineTests: XCTestCase {
    var db: TestDatabase!
    override func setUpWithError() throws { db = try TestDatabase(migrated: false) }
    override func tearDown() { db?.drop() }

    func testPipelineRunsEveryStatementInOneRoundTrip() throws {
        let c = try db.connect()
        defer { c.close() }
        try c.simpleQuery("CREATE TABLE t (id int PRIMARY KEY, v text)")
        let before = c.roundTrips
        let out = try c.pipeline([
            PostgresStatement("INSERT INTO t VALUES ($1, $2)", [1, "a"]),
            PostgresStatement("INSERT INTO t VALUES ($1, $2)", [2, "b"]),
            PostgresStatement("SELECT v FROM t WHERE id = ANY($1::int[]) ORDER BY id", ["{1,2}"]),
            PostgresStatement("SELECT 1 AS one")
        ]).get()
        XCTAssertEqual(c.roundTrips - before, 1, "four statements, one round trip")
        XCTAssertEqual(out.count, 4)
        XCTAssertEqual(out[0].affected, 1)
        XCTAssertEqual(try out[2].rows.map { try $0.string("v") }, ["a", "b"])
        XCTAssertEqual(try out[3].rows[0].int("one"), 1)
        // Parameterised statements are now prepared by name on this session; reusing the text reuses them.
        XCTAssertEqual(c.preparedNames.count, 2, "two distinct parameterised texts")
        let again = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1, $2)", [3, "c"])]).get()
        XCTAssertEqual(again[0].affected, 1)
        XCTAssertEqual(c.preparedNames.count, 2)
        let names = try c.query("SELECT count(*)::int AS n FROM pg_prepared_statements")[0].int("n")
        XCTAssertEqual(names, 2, "the server holds exactly the cached statements")
    }

    /// `PostgresStatement.combined`: each part's placeholders follow the previous parts'
    /// (`$10` and `$1` alike), and the one statement runs every part and returns `select`.
    func testACombinedStatementRenumbersEachPartsPlaceholdersAndRunsEveryPart() throws {
        XCTAssertEqual(PostgresStatement.renumbered("a = $1 AND b = $10 OR $2::int", by: 3), "a = $4 AND b = $13 OR $5::int")
        XCTAssertEqual(PostgresStatement.renumbered("a = $1", by: 0), "a = $1")
        let c = try db.connect()
        defer { c.close() }
        try c.simpleQuery("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE u (id int PRIMARY KEY, n int); INSERT INTO u VALUES (1, 0)")
        let combined = PostgresStatement.combined(
            [
                PostgresStatement("INSERT INTO t VALUES ($1, $2) RETURNING id, v", [1, "a"]),
                PostgresStatement("UPDATE u SET n = n + $2 WHERE id = $1 RETURNING n", [1, 5]),
                PostgresStatement("INSERT INTO t VALUES ($1, $2)", [2, "b"])
            ], select: "SELECT * FROM w0 CROSS JOIN w1")
        XCTAssertEqual(combined.params.count, 6)
        let before = c.statementsSent
        let out = try c.pipeline([combined]).get()
        XCTAssertEqual(c.statementsSent - before, 1)
        XCTAssertEqual(try out[0].rows.map { [try $0.string("v"), String(try $0.int("n"))] }, [["a", "5"]])
        XCTAssertEqual(try c.query("SELECT string_agg(v, ',' ORDER BY id) AS vs FROM t")[0].string("vs"), "a,b", "the part without RETURNING ran too")
    }

    /// `CombinedTexts`: a shape's text is built once and then reused, and two shapes whose
    /// parts have the same lengths never get each other's text (no I/O).
    func testCombinedTextsAreReusedPerShapeAndNeverMixedUpBetweenShapesOfEqualLengths() {
        let a = [PostgresStatement("UPDATE a SET x = $1", [1]), PostgresStatement("DELETE FROM q WHERE y = $1", [2])]
        let b = [PostgresStatement("UPDATE b SET x = $1", [3]), PostgresStatement("DELETE FROM r WHERE y = $1", [4])]
        XCTAssertEqual(a.map(\.sql.utf8.count), b.map(\.sql.utf8.count), "same lengths: same cache key")
        let select = "SELECT 1"
        let expectedA = "WITH w0 AS (UPDATE a SET x = $1), w1 AS (DELETE FROM q WHERE y = $2) SELECT 1"
        let expectedB = "WITH w0 AS (UPDATE b SET x = $1), w1 AS (DELETE FROM r WHERE y = $2) SELECT 1"
        for _ in 0..<3 {
            XCTAssertEqual(PostgresStatement.combined(a, select: select).sql, expectedA)
            XCTAssertEqual(PostgresStatement.combined(b, select: select).sql, expectedB)
        }
        var built = 0
        let cache = CombinedTexts()
        for _ in 0..<3 {
            _ = cache.text(a.map(\.sql), [1, 1], select) {
                built += 1; return expectedA
            }
        }
        XCTAssertEqual(built, 1, "built once, then reused")
        _ = cache.text(b.map(\.sql), [1, 1], select) {
            built += 1; return expectedB
        }
        XCTAssertEqual(built, 2, "another shape of the same lengths is built, not taken from the entry")
        // The same texts with other parameter counts renumber differently: not the cached text.
        let wider = [PostgresStatement("UPDATE a SET x = $1, y = $2", [1, 2]), PostgresStatement("DELETE FROM q WHERE y = $1", [3])]
        let narrow = [PostgresStatement("UPDATE a SET x = $1, y = $2", [1]), PostgresStatement("DELETE FROM q WHERE y = $1", [3])]
        XCTAssertEqual(
            PostgresStatement.combined(wider, select: select).sql,
            "WITH w0 AS (UPDATE a SET x = $1, y = $2), w1 AS (DELETE FROM q WHERE y = $3) SELECT 1")
        XCTAssertEqual(
            PostgresStatement.combined(narrow, select: select).sql,
            "WITH w0 AS (UPDATE a SET x = $1, y = $2), w1 AS (DELETE FROM q WHERE y = $2) SELECT 1",
            "renumbered by the first part's parameter count, not taken from the other shape's entry")
        XCTAssertEqual(PostgresStatement.combined(a, select: select).params.count, 2)
    }

    /// `CombinedTexts.sameBytes` compares bytes, not Unicode equivalence: a precomposed `é`
    /// and `e` + combining acute are equal Swift strings but different SQL texts. Equal bytes in
    /// separate storage, shared storage and empty texts are the same (no I/O).
    func testCombinedTextsCompareBytesNotUnicodeEquivalence() {
        let composed = "SELECT 'caf\u{E9}'", decomposed = "SELECT 'cafe\u{301}'"
        XCTAssertEqual(composed, decomposed, "Swift's == says equal")
        XCTAssertFalse(CombinedTexts.sameBytes(composed, decomposed))
        let copy = String(decoding: Array(composed.utf8), as: UTF8.self)
        XCTAssertTrue(CombinedTexts.sameBytes(composed, copy))
        XCTAssertTrue(CombinedTexts.sameBytes(composed, composed))
        // Longer than Swift's 15-byte small strings, so these live in heap storage: one shared
        // buffer, and a copy in another with one byte changed.
        let long = "SELECT " + String(repeating: "x", count: 64)
        XCTAssertTrue(CombinedTexts.sameBytes(long, long))
        XCTAssertTrue(CombinedTexts.sameBytes(long, String(decoding: Array(long.utf8), as: UTF8.self)))
        XCTAssertFalse(CombinedTexts.sameBytes(long, "SELECT " + String(repeating: "x", count: 63) + "y"))
        XCTAssertTrue(CombinedTexts.sameBytes("", ""))
        XCTAssertFalse(CombinedTexts.sameBytes("SELECT 1", "SELECT 2"))
        XCTAssertFalse(CombinedTexts.sameBytes("SELECT 1", "SELECT 10"))
    }

    func testAParameterWithANULByteIsRefusedBeforeAnythingIsSent() throws {
        let c = try db.connect()
        defer { c.close() }
        try c.simpleQuery("CREATE TABLE t (v text)")
        let before = c.roundTrips
        for bad in ["a\u{0}b", "\u{0}", "ünï\u{0}"] {
            XCTAssertThrowsError(try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1)", [bad])])) {
                XCTAssertEqual(($0 as? PostgresError)?.kind, .query, "pipeline: \(bad.debugDescription)")
            }
            XCTAssertThrowsError(try c.execute("INSERT INTO t VALUES ($1)", [bad])) {
                XCTAssertEqual(($0 as? PostgresError)?.kind, .query, "execute: \(bad.debugDescription)")
            }
        }
        XCTAssertEqual(c.roundTrips, before, "refused before any round trip")
        // Multi-byte UTF-8 and empty texts are not mistaken for a NUL byte.
        _ = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1), ($2)", ["ünï 🌍", ""])]).get()
        XCTAssertEqual(try c.query("SELECT v FROM t ORDER BY v").map { try $0.string("v") }, ["", "ünï 🌍"])
    }

    func testAPreparedStatementReusesItsColumnLayoutOnlyWhileTheNamesMatch() throws {
        let c = try db.connect()
        defer { c.close() }
        let sql = "SELECT $1::int AS a, $2::text AS b"
        let first = try c.pipeline([PostgresStatement(sql, [1, "x"])]).get()[0].rows[0]
        let second = try c.query(sql, [2, "y"])[0]
        XCTAssertTrue(first.layout === second.layout, "the second result reuses the first's layout")
        XCTAssertEqual(try second.int("a"), 2)
        XCTAssertEqual(try second.string("b"), "y")
        // A cached layout whose names differ from the result's is replaced, never trusted.
        let stale = PostgresColumnLayout(["a", "z"])
        c.preparedNames[sql]?.layout = stale
        let third = try c.pipeline([PostgresStatement(sql, [3, "w"])]).get()[0].rows[0]
        XCTAssertFalse(third.layout === stale)
        XCTAssertEqual(third.columns, ["a", "b"])
        XCTAssertEqual(try third.string("b"), "w")
        XCTAssertTrue(c.preparedNames[sql]?.layout === third.layout)
        c.preparedNames[sql]?.layout = PostgresColumnLayout(["a"])
        XCTAssertEqual(try c.query(sql, [4, "v"])[0].columns, ["a", "b"], "a different column count is replaced too")
    }

    func testFailureStopsThePipelineAndNamesTheStatement() throws {
        let c = try db.connect()
        defer { c.close() }
        try c.simpleQuery("CREATE TABLE t (id int PRIMARY KEY)")
        let out = try c.pipeline([
            PostgresStatement("INSERT INTO t VALUES ($1)", [1]),
            PostgresStatement("INSERT INTO t VALUES ($1)", [1]),  // duplicate key
            PostgresStatement("INSERT INTO t VALUES ($1)", [2])
        ])
        XCTAssertEqual(out.results.count, 1, "only the statement before the failure has a result")
        XCTAssertEqual(out.failure?.index, 1)
        XCTAssertEqual(out.failure?.error.sqlState, "23505")
        XCTAssertThrowsError(try out.get())
        // Outside a transaction the pipeline was one implicit transaction: nothing stayed.
        XCTAssertEqual(try c.query("SELECT count(*)::int AS n FROM t")[0].int("n"), 0)
        // A statement text whose prepare failed is not cached, and the session is still usable.
        let bad = try c.pipeline([PostgresStatement("SELEC $1", [1])])
        XCTAssertEqual(bad.failure?.error.sqlState, "42601")
        XCTAssertNil(c.preparedNames["SELEC $1"])
        XCTAssertEqual(try c.query("SELECT $1::int AS n", [5])[0].int("n"), 5)
    }

    func testLazyTransactionSendsBeginWithTheFirstStatementAndCommitsInTheLast() throws {
        let c = try db.connect()
        defer { c.close() }
        try c.simpleQuery("CREATE TABLE t (id int PRIMARY KEY, who text)")
        let reports = Locked<[PostgresTransactionReport]>([])
        PostgresInstrumentation.setObserver { r in reports.withLock { $0.append(r) } }
        defer { PostgresInstrumentation.setObserver(nil) }
        try c.transaction(settings: [("app.who", "me")], lazyBegin: true) { c in
            c.transactionLabel = "pipelined"
            let r = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1, current_setting('app.who')) RETURNING who", [1])]).get()
            XCTAssertEqual(try r[0].rows[0].string("who"), "me", "the settings ran first, in the same round trip")
            _ = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1, $2)", [2, "x"])], commit: true).get()
        }
        let mine = reports.withLock { $0 }.filter { $0.label == "pipelined" }
        XCTAssertEqual(mine.count, 1)
        XCTAssertEqual(mine.first?.roundTrips, 2, "BEGIN rode with the first pipeline, COMMIT with the second")
        XCTAssertEqual(mine.first?.committed, true)
        XCTAssertEqual(try c.query("SELECT count(*)::int AS n FROM t")[0].int("n"), 2)
        // A failing body rolls everything back.
        XCTAssertThrowsError(
            try c.transaction(lazyBegin: true) { c in
                _ = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1, $2)", [3, "y"])]).get()
                _ = try c.pipeline([PostgresStatement("INSERT INTO t VALUES ($1, $2)", [1, "dup"])]).get()
            })
        XCTAssertEqual(try c.query("SELECT count(*)::int AS n FROM t")[0].int("n"), 2)
        // A body that sends nothing opens no transaction and costs no round trip.
        let before = c.roundTrips
        try c.transaction(lazyBegin: true) { _ in }
        XCTAssertEqual(c.roundTrips, before)
    }

    func testSettingsAddedBeforeTheFirstStatementRideInTheBeginsOneStatement() throws {
        let c = try db.connect()
        defer { c.close() }
        try c.transaction(settings: [("app.a", "1")], lazyBegin: true) { c in
            XCTAssertTrue(c.addPendingSettings([("app.b", "2"), ("app.c", "3")]))
            XCTAssertEqual(c.pendingBegin?.count, 2, "BEGIN and one set_config statement")
            let before = c.roundTrips
            let r = try c.query("SELECT current_setting('app.a') || current_setting('app.b') || current_setting('app.c') AS v")
            XCTAssertEqual(try r[0].string("v"), "123")
            XCTAssertEqual(c.roundTrips - before, 1)
            XCTAssertFalse(c.addPendingSettings([("app.d", "4")]), "the BEGIN has been sent")
            XCTAssertEqual(try c.query("SELECT current_setting('app.d', true) AS v")[0].optionalString("v") ?? "", "")
        }
        // Without settings of its own, a lazy transaction gains the set_config statement.
        try c.transaction(lazyBegin: true) { c in
            XCTAssertTrue(c.addPendingSettings([("app.b", "x")]))
            XCTAssertEqual(try c.query("SELECT current_setting('app.b') AS v")[0].string("v"), "x")
        }
        // Transaction-local: gone after the commit; a transaction begun at once takes none.
        XCTAssertEqual(try c.query("SELECT current_setting('app.b', true) AS v")[0].optionalString("v") ?? "", "")
        try c.transaction(lazyBegin: false) { c in XCTAssertFalse(c.addPendingSettings([("app.b", "y")])) }
    }
}
