import Foundation
import XCTest
import JSON

/// docs/http-conventions.md for the operator's tenant creation: the same idempotency_key replays the same tenant
/// and the same credentials (stored sealed), another body under it is 422.
final class OperatorIdempotencyTests: APITestCase {
    func testTenantCreationReplaysTheSameCredentials() throws {
        let op = try env.operatorKey()
        let body: JSONValue = ["name": "Replay Inc", "daily_push_quota": 50, "idempotency_key": "tenant-1"]
        let a = env.call("POST", "/v1/operator/tenants", body, as: op)
        XCTAssertEqual(a.status, 201)
        let b = env.call("POST", "/v1/operator/tenants", body, as: op)
        XCTAssertEqual(b.status, 201, "a replayed creation answers 201 again")
        XCTAssertEqual(b.headers["idempotent-replayed"], "true")
        XCTAssertEqual(a.raw, b.raw)
        let master = b["master_key"]?["credential"]?.stringValue ?? ""
        XCTAssertEqual(env.call("GET", "/v1/master-keys", as: master).status, 200, "the replayed credential works")
        let list = env.call("GET", "/v1/operator/tenants?limit=200", as: op)
        XCTAssertEqual(list["data"]?.arrayValue?.filter { $0["name"] == "Replay Inc" }.count, 1, "one tenant, not two")
        let c = env.call("POST", "/v1/operator/tenants", ["name": "Other", "idempotency_key": "tenant-1"], as: op)
        XCTAssertEqual(c.status, 422)
        XCTAssertEqual(c.errorCode, "IDEMPOTENCY_KEY_REUSED")
        let stored = try env.db.system { c in
            try c.query("SELECT response_sealed FROM operator_idempotency_records")[0].bytes("response_sealed")
        }
        XCTAssertNil(String(decoding: stored, as: UTF8.self).range(of: master), "the stored response is sealed")
    }
}
