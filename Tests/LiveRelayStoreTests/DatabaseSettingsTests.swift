import XCTest

@testable import LiveRelayStore

/// `Database.system(settings:)` (Sources/LiveRelayStore/Database.swift): a caller's transaction
/// settings may tune the planner but never change the tenant scope, the timeouts or the role.
final class DatabaseSettingsTests: XCTestCase {
    func testScopeTimeoutsAndRoleAreProtectedInAnyCase() {
        for name in [
            "app.scope", "app.tenant_id", "APP.Scope", "lock_timeout", "statement_timeout", "Statement_Timeout",
            "idle_in_transaction_session_timeout", "role", "session_authorization", "row_security"
        ] {
            XCTAssertTrue(Database.isProtected(name), name)
        }
    }

    func testPlannerSettingsAreAllowed() {
        for name in ["random_page_cost", "plan_cache_mode", "enable_hashjoin", "work_mem", "application_name"] {
            XCTAssertFalse(Database.isProtected(name), name)
        }
        XCTAssertTrue(DispatchStore.claimSettings.allSatisfy { !Database.isProtected($0.0) }, "the claim's own settings pass")
    }
}
