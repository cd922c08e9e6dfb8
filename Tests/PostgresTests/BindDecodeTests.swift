import Foundation
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// Every bindable type round-trips through a real server, NULL included; injection stays data.
final class BindDecodeTests: XCTestCase {
    private var connection: PostgresConnection!

    override func setUpWithError() throws {
        connection = try PostgresConnection(try TestDatabase.baseURL())
    }

    override func tearDown() {
        connection?.close()
    }

    func testSessionRunsInUTCWithISODates() throws {
        let row = try XCTUnwrap(
            connection.query(
                "SELECT current_setting('TimeZone') AS tz, current_setting('DateStyle') AS ds, current_setting('application_name') AS app"
            ).first)
        XCTAssertEqual(try row.string("tz"), "UTC")
        XCTAssertTrue(try row.string("ds").hasPrefix("ISO"))
        XCTAssertEqual(try row.string("app"), "liverelay")
    }

    func testStringRoundTripIncludingUnicodeQuotesAndEmpty() throws {
        for value in ["", "plain", "héllo wörld 🌍 中文", "it's \"quoted\" \\ back", "line\nbreak\ttab", String(repeating: "x", count: 100_000)] {
            let row = try XCTUnwrap(connection.query("SELECT $1::text AS v, length($1::text) AS n", [value]).first)
            XCTAssertEqual(try row.string("v"), value)
            XCTAssertEqual(try row.int("n"), value.count)
        }
    }

    func testIntegersRoundTripAtTheirLimits() throws {
        for value in [0, 1, -1, Int.max, Int.min] {
            XCTAssertEqual(try connection.query("SELECT $1::int8 AS v", [value]).first?.int("v"), value)
        }
        for value in [Int32.max, Int32.min] {
            XCTAssertEqual(try connection.query("SELECT $1::int4 AS v", [value]).first?.int("v"), Int(value))
        }
        for value in [Int64.max, Int64.min] {
            XCTAssertEqual(try connection.query("SELECT $1::int8 AS v", [value]).first?.int64("v"), value)
        }
    }

    func testBoolAndDoubleRoundTrip() throws {
        for value in [true, false] {
            XCTAssertEqual(try connection.query("SELECT $1::bool AS v", [value]).first?.bool("v"), value)
        }
        for value in [0.1, -1.5e300, Double.pi, Double.leastNonzeroMagnitude, 1e-5, Double.infinity, -Double.infinity] {
            XCTAssertEqual(try connection.query("SELECT $1::float8 AS v", [value]).first?.double("v"), value)
        }
        XCTAssertTrue(try XCTUnwrap(connection.query("SELECT $1::float8 AS v", [Double.nan]).first).double("v").isNaN)
    }

    func testTimestamptzKeepsMicroseconds() throws {
        let date = Date(timeIntervalSince1970: 1_714_564_800.123456)
        let row = try XCTUnwrap(
            connection.query("SELECT $1::timestamptz AS v, $1::timestamptz::text AS t, extract(microseconds FROM $1::timestamptz)::int AS us", [date])
                .first)
        XCTAssertEqual(try row.string("t"), "2024-05-01 12:00:00.123456+00")
        XCTAssertEqual(try row.int("us"), 123_456)
        XCTAssertEqual(try row.date("v").timeIntervalSince1970, date.timeIntervalSince1970, accuracy: 0.000_000_5)
        let before1970 = Date(timeIntervalSince1970: -1.000_001)
        XCTAssertEqual(
            try connection.query("SELECT $1::timestamptz AS v", [before1970]).first?.date("v").timeIntervalSince1970 ?? 0,
            before1970.timeIntervalSince1970, accuracy: 0.000_000_5)
        let serverNow = try XCTUnwrap(connection.query("SELECT now() AS v").first).date("v")
        XCTAssertEqual(serverNow.timeIntervalSinceNow, 0, accuracy: 60)
    }

    func testByteaRoundTripsAllByteValues() throws {
        let all = (0...255).map { UInt8($0) }
        let row = try XCTUnwrap(connection.query("SELECT $1::bytea AS v, length($1::bytea) AS n", [all]).first)
        XCTAssertEqual(try row.bytes("v"), all)
        XCTAssertEqual(try row.int("n"), 256)
        XCTAssertEqual(try connection.query("SELECT $1::bytea AS v", [[UInt8]()]).first?.bytes("v"), [])
    }

    func testUUIDRoundTrip() throws {
        let id = UUID()
        XCTAssertEqual(try connection.query("SELECT $1::uuid AS v", [id]).first?.uuid("v"), id)
    }

    func testNullForEveryTypeDecodesAsNilAndRequiredAccessorsThrow() throws {
        let params: [(any PostgresBindable)?] = [nil, Int?.none, Bool?.none, Double?.none, Date?.none, [UInt8]?.none, String?.none]
        let row = try XCTUnwrap(
            connection.query(
                "SELECT $1::text AS s, $2::int8 AS i, $3::bool AS b, $4::float8 AS d, $5::timestamptz AS t, $6::bytea AS y, $7::text AS o, ($1::text IS NULL) AS isnull",
                params
            ).first)
        XCTAssertTrue(try row.bool("isnull"))
        XCTAssertNil(row["s"])
        XCTAssertNil(try row.optionalString("s"))
        XCTAssertNil(try row.optionalInt("i"))
        XCTAssertNil(try row.optionalBool("b"))
        XCTAssertNil(try row.optionalDouble("d"))
        XCTAssertNil(try row.optionalDate("t"))
        XCTAssertNil(try row.optionalBytes("y"))
        XCTAssertNil(try row.optionalString("o"))
        assertPostgresError(.decoding) { try row.string("s") }
        assertPostgresError(.decoding) { try row.int("i") }
        assertPostgresError(.decoding) { try row.bool("b") }
        assertPostgresError(.decoding) { try row.double("d") }
        assertPostgresError(.decoding) { try row.date("t") }
        assertPostgresError(.decoding) { try row.bytes("y") }
        assertPostgresError(.decoding) { try row.string("no_such_column") }
        let some: Int? = 7
        XCTAssertEqual(try connection.query("SELECT $1::int AS v", [some]).first?.optionalInt("v"), 7)
    }

    func testTextArrayWithCommasQuotesBackslashesRoundTrips() throws {
        let values = ["a", "b,c", "say \"hi\"", "back\\slash", "", "NULL", " spaced ", "{brace}", "ünï 🌍", "x\"\\,{}"]
        let row = try XCTUnwrap(
            connection.query(
                "SELECT $1::text[] AS v, cardinality($1::text[]) AS n, 'b,c' = ANY($1) AS has, 'b' = ANY($1) AS hasnot",
                [PostgresTextArray(values)]
            ).first)
        XCTAssertEqual(try row.stringArray("v"), values)
        XCTAssertEqual(try row.int("n"), values.count)
        XCTAssertTrue(try row.bool("has"))
        XCTAssertFalse(try row.bool("hasnot"))
        XCTAssertEqual(try connection.query("SELECT $1::text[] AS v", [PostgresTextArray([])]).first?.stringArray("v"), [])
        assertPostgresError(.decoding) { try connection.query("SELECT ARRAY['a', NULL] AS v").first?.stringArray("v") }
    }

    func testSQLInjectionAttemptStaysData() throws {
        try connection.execute("CREATE TEMP TABLE people (name text NOT NULL)")
        let evil = "x'); DROP TABLE people; --"
        XCTAssertEqual(try connection.execute("INSERT INTO people (name) VALUES ($1)", [evil]), 1)
        XCTAssertEqual(try connection.query("SELECT name FROM people WHERE name = $1", [evil]).first?.string("name"), evil)
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM people").first?.int("n"), 1)
        try connection.listen(evil)  // identifier quoting keeps it one name
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM pg_listening_channels() c WHERE c = $1", [evil]).first?.int("n"), 1)
    }

    func testExecuteReportsRowsAffectedAndSimpleQueryRunsScripts() throws {
        try connection.simpleQuery("CREATE TEMP TABLE n (v int); INSERT INTO n SELECT generate_series(1, 5);")
        XCTAssertEqual(try connection.execute("UPDATE n SET v = v + 1 WHERE v > $1", [2]), 3)
        XCTAssertEqual(try connection.execute("DELETE FROM n"), 5)
        let error = assertPostgresError(.query) { try connection.simpleQuery("SELECT 1; SELECT * FROM no_such_table") }
        XCTAssertEqual(error?.sqlState, "42P01")
        XCTAssertTrue(connection.isHealthy)
    }

    func testClosedConnectionThrowsClosed() throws {
        connection.close()
        XCTAssertFalse(connection.isHealthy)
        assertPostgresError(.closed) { try connection.query("SELECT 1") }
    }

    func testBadLoginFailsWithConnectionError() throws {
        let base = try TestDatabase.baseURL()
        assertPostgresError(.connection) { try PostgresConnection(TestDatabase.conninfo(base, database: "no_such_db_here")) }
    }
}
