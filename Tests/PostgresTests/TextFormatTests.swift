import Foundation
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// Pure text-format helpers: timestamps, bytea, array literals. No database.
final class TextFormatTests: XCTestCase {
    func testTimestampFormatKeepsMicrosecondsInUTC() {
        XCTAssertEqual(
            PostgresTimestamp.format(Date(timeIntervalSince1970: 1_714_564_800.123456)),
            "2024-05-01T12:00:00.123456Z")
        XCTAssertEqual(PostgresTimestamp.format(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000000Z")
        XCTAssertEqual(PostgresTimestamp.format(Date(timeIntervalSince1970: -0.000001)), "1969-12-31T23:59:59.999999Z")
        XCTAssertEqual(PostgresTimestamp.format(Date(timeIntervalSince1970: 951_782_400)), "2000-02-29T00:00:00.000000Z")
    }

    func testTimestampParsesServerOutputAndOffsets() throws {
        let expected = 1_714_564_800.123456
        for text in [
            "2024-05-01 12:00:00.123456+00", "2024-05-01T12:00:00.123456Z",
            "2024-05-01 17:30:00.123456+05:30", "2024-05-01 06:00:00.123456-06"
        ] {
            let date = try XCTUnwrap(PostgresTimestamp.parse(text), text)
            XCTAssertEqual(date.timeIntervalSince1970, expected, accuracy: 0.000_000_5, text)
        }
        XCTAssertEqual(PostgresTimestamp.parse("2024-05-01 12:00:00+00")?.timeIntervalSince1970, 1_714_564_800)
        XCTAssertEqual(
            try XCTUnwrap(PostgresTimestamp.parse("2024-05-01 12:00:00.5+00")).timeIntervalSince1970,
            1_714_564_800.5, accuracy: 1e-9)
        for bad in ["infinity", "-infinity", "2024-13-01 00:00:00+00", "2024-05-01 12:00", "0044-03-15 00:00:00+00 BC", ""] {
            XCTAssertNil(PostgresTimestamp.parse(bad), bad)
        }
    }

    func testByteaHexRoundTrip() {
        let all = (0...255).map { UInt8($0) }
        XCTAssertEqual(PostgresBytea.parse(PostgresBytea.format(all)), all)
        XCTAssertEqual(PostgresBytea.format([0x00, 0xab, 0xff]), "\\x00abff")
        XCTAssertEqual(PostgresBytea.parse("\\x"), [])
        XCTAssertNil(PostgresBytea.parse("\\x0"))
        XCTAssertNil(PostgresBytea.parse("abc"))
    }

    func testTextArrayLiteralQuotesEverything() {
        XCTAssertEqual(
            PostgresTextArray(["a", "b,c", "say \"hi\"", "back\\slash", ""]).postgresText,
            #"{"a","b,c","say \"hi\"","back\\slash",""}"#)
        XCTAssertEqual(PostgresTextArray([]).postgresText, "{}")
    }

    func testArrayParserHandlesQuotingAndNull() {
        XCTAssertEqual(
            PostgresArrayParser.parse(#"{a,"b,c","say \"hi\"","back\\slash","",NULL}"#),
            ["a", "b,c", "say \"hi\"", "back\\slash", "", nil])
        XCTAssertEqual(PostgresArrayParser.parse("{}"), [])
        XCTAssertEqual(PostgresArrayParser.parse(#"{"NULL"}"#), ["NULL"])
        XCTAssertEqual(PostgresArrayParser.parse("[0:1]={x,y}"), ["x", "y"])
        for bad in ["", "{", "{a", "{a,}", "{{a},{b}}", "a,b", "{a}x"] {
            XCTAssertNil(PostgresArrayParser.parse(bad), bad)
        }
    }

    func testBindableTextForms() {
        XCTAssertEqual(true.postgresText, "t")
        XCTAssertEqual(false.postgresText, "f")
        XCTAssertEqual(Double.infinity.postgresText, "Infinity")
        XCTAssertEqual((-Double.infinity).postgresText, "-Infinity")
        XCTAssertEqual(Double.nan.postgresText, "NaN")
        XCTAssertNil(Optional<Int>.none.postgresText)
        XCTAssertEqual(Optional(5).postgresText, "5")
        let id = UUID(uuidString: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8")!
        XCTAssertEqual(id.postgresText, "6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    }

    func testRowAccessorsThrowDecodingOnNullMissingAndGarbage() {
        let row = PostgresRow(columns: ["n", "x", "s"], values: [nil, "abc", "5"])
        XCTAssertNil(row["n"])
        XCTAssertNil(row["nope"])
        XCTAssertEqual(row["s"], "5")
        assertPostgresError(.decoding) { try row.string("n") }
        assertPostgresError(.decoding) { try row.optionalString("nope") }
        assertPostgresError(.decoding) { try row.int("x") }
        assertPostgresError(.decoding) { try row.optionalBool("x") }
        assertPostgresError(.decoding) { try row.date("x") }
        XCTAssertNil(try row.optionalInt("n"))
        XCTAssertEqual(try row.int("s"), 5)
    }

    func testErrorClassificationAndDescription() {
        let unique = PostgresError(kind: .query, message: "duplicate", sqlState: "23505", constraint: "t_pkey")
        XCTAssertTrue(unique.isUniqueViolation)
        XCTAssertFalse(unique.isSerializationFailure)
        XCTAssertTrue(PostgresError(kind: .query, message: "", sqlState: "40001").isSerializationFailure)
        XCTAssertTrue(PostgresError(kind: .query, message: "", sqlState: "40P01").isSerializationFailure)
        XCTAssertEqual(unique.description, "PostgresError(query, sqlState 23505, constraint t_pkey): duplicate")
        XCTAssertEqual(MigrationError.modified("0002_x").description, "migration 0002_x was modified after it was applied")
    }

    func testConninfoHelperSwapsDatabase() {
        XCTAssertEqual(
            TestDatabase.conninfo("postgresql:///liverelay?host=/tmp/x/run&user=liverelay", database: "db2"),
            "postgresql:///db2?host=/tmp/x/run&user=liverelay")
        XCTAssertEqual(TestDatabase.conninfo("postgres://u@h:5432/a", database: "b"), "postgres://u@h:5432/b")
        XCTAssertEqual(TestDatabase.conninfo("host=/tmp user=u", database: "b"), "host=/tmp user=u dbname=b")
    }
}
