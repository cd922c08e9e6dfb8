import XCTest
import Postgres
@testable import LiveRelayStore

/// `KeysetConditions` (docs/http-conventions.md "Pagination"): only present filters become conditions,
/// each with its own placeholder, numbered in order, so no condition of a list query is an
/// `IS NULL OR` that a generic plan cannot use as an index condition.
final class KeysetConditionsTests: XCTestCase {
    func testAbsentFiltersAddNothingAndPlaceholdersNumberInOrder() {
        var w = KeysetConditions()
        w.add("tenant_id = ?", "ten_1")
        w.add("id > ?", ifPresent: nil)
        w.add("status = ?", ifPresent: "ready")
        let limit = w.bind(51)
        XCTAssertEqual(w.clause, "tenant_id = $1 AND status = $2")
        XCTAssertEqual(limit, "$3")
        XCTAssertEqual(w.params.map { $0?.postgresText }, ["ten_1", "ready", "51"])
        XCTAssertFalse(w.clause.contains("IS NULL"))
    }

    func testATermWithSeveralValuesBindsEachInTurn() {
        var w = KeysetConditions()
        w.add("tenant_id = ?", "ten_1")
        w.add("id > ?", ifPresent: "tgt_5")
        w.add(
            "(id = ANY(?::text[]) OR (start_target_id = ANY(?::text[]) AND created_by_key_id = ?))", PostgresTextArray(["a"]),
            PostgresTextArray(["b"]), "key_1")
        XCTAssertEqual(
            w.clause, "tenant_id = $1 AND id > $2 AND (id = ANY($3::text[]) OR (start_target_id = ANY($4::text[]) AND created_by_key_id = $5))")
        XCTAssertEqual(w.params.count, 5)
        XCTAssertEqual(w.params[4]?.postgresText, "key_1")
    }

    func testNoConditionsIsTrue() {
        XCTAssertEqual(KeysetConditions().clause, "TRUE")
    }
}
