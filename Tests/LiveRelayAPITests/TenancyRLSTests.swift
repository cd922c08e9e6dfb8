import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/configuration.md: PostgreSQL row-level security enforces the tenant boundary as a second wall
/// behind the `tenant_id` filter of every statement.
final class TenancyRLSTests: TenancyTestCase {
    /// Every table of the schema with a `tenant_id` column.
    func tenantTables() throws -> [String] {
        try env.db.system { c in
            try c.query(
                """
                SELECT table_name::text AS t FROM information_schema.columns
                 WHERE table_schema = 'public' AND column_name = 'tenant_id' ORDER BY 1
                """
            ).map { try $0.string("t") }
        }
    }

    /// Rows of one tenant in every tenant table, made through the API and the fixtures.
    func populate(_ t: TestEnvironment.Tenant) throws {
        let st = try Fixtures.startTarget(env, tenant: t.id)
        _ = try senderKey(t, targets: [st])  // sender_keys, idempotency_records, audit_events
        _ = try installation(t)  // installations, installation_credentials
        try env.db.tenant(t.id) { c in
            let inst = try c.query("SELECT installation_id FROM start_targets WHERE tenant_id = $1 AND id = $2", [t.id, st])[0].string(
                "installation_id")
            let target = Identifier.make(.target)
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, start_target_id, origin, activity_type, status, state)
                VALUES ($1, $2, $3, $4, 'remote', 'delivery', 'reserved', '{}')
                """, [t.id, target, inst, st])
            try c.execute(
                """
                INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, consumes_quota)
                VALUES ($1, $2, $3, 1, 'start', 'queued', 1, false, false)
                """, [t.id, Identifier.make(.operation), target])
            try c.execute("INSERT INTO push_quota (tenant_id, day) VALUES ($1, current_date)", [t.id])
        }
    }

    func count(_ c: PostgresConnection, _ table: String) throws -> Int {
        try c.query("SELECT count(*)::int AS n FROM \(table)")[0].int("n")
    }

    func testRowLevelSecurityIsolatesTenants() throws {
        let a = try tenant(name: "A"), b = try tenant(name: "B")
        try populate(a)
        try populate(b)
        let tables = try tenantTables()
        let expected: Set<String> = [
            "tenants", "master_keys", "sender_keys", "publishable_keys", "installations",
            "installation_credentials", "audit_events", "idempotency_records",
            "bindings", "template_versions", "start_targets", "targets", "operations", "push_quota"
        ]
        XCTAssertTrue(expected.isSubset(of: Set(tables)), "tenant tables: \(tables)")

        // The service role can neither ignore nor bypass the policies.
        try env.pool.transaction { c in
            let role = try c.query("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")[0]
            XCTAssertFalse(try role.bool("rolsuper"), "the service must not connect as a superuser")
            XCTAssertFalse(try role.bool("rolbypassrls"))
            for t in tables {
                let flags = try c.query("SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = $1::regclass", [t])[0]
                XCTAssertTrue(try flags.bool("relrowsecurity"), "\(t): row-level security enabled")
                XCTAssertTrue(try flags.bool("relforcerowsecurity"), "\(t): FORCE ROW LEVEL SECURITY (applies to the owner too)")
            }
        }

        // Rows exist (system scope sees both tenants)…
        let all = try env.db.system { c in try Dictionary(uniqueKeysWithValues: tables.map { ($0, try count(c, $0)) }) }
        for t in expected { XCTAssertGreaterThanOrEqual(all[t] ?? 0, 2, "\(t) holds rows of both tenants") }

        // …but a transaction without the tenant setting sees none of them.
        try env.pool.transaction { c in
            for t in tables { XCTAssertEqual(try count(c, t), 0, "\(t) visible without app.tenant_id") }
        }
        try env.pool.withConnection { c in  // nor outside any explicit transaction
            for t in tables { XCTAssertEqual(try count(c, t), 0, "\(t) visible without app.tenant_id (autocommit)") }
        }

        // Scoped to A: only A's rows, all of them.
        for (me, other) in [(a.id, b.id), (b.id, a.id)] {
            try env.db.tenant(me) { c in
                for t in tables {
                    let r = try c.query(
                        """
                        SELECT count(*)::int AS n, count(*) FILTER (WHERE tenant_id <> $1)::int AS foreign_rows FROM \(t)
                        """, [me])[0]
                    XCTAssertEqual(try r.int("foreign_rows"), 0, "\(t): another tenant's rows visible")
                    if expected.contains(t) { XCTAssertGreaterThan(try r.int("n"), 0, "\(t): own rows visible") }
                }
                // A filter naming the other tenant finds nothing, and cannot change anything.
                XCTAssertEqual(try c.query("SELECT 1 AS one FROM master_keys WHERE tenant_id = $1", [other]).count, 0)
                XCTAssertEqual(try c.execute("UPDATE tenants SET name = 'hijacked' WHERE tenant_id = $1", [other]), 0)
                XCTAssertEqual(try c.execute("DELETE FROM audit_events WHERE tenant_id = $1", [other]), 0)
            }
        }
        XCTAssertEqual(try env.db.system { c in try c.query("SELECT name FROM tenants WHERE tenant_id = $1", [b.id])[0].string("name") }, "B")
        XCTAssertEqual(try env.db.system { c in try count(c, "audit_events") }, all["audit_events"])

        // Writing a row for another tenant while scoped to one fails (WITH CHECK).
        XCTAssertThrowsError(
            try env.db.tenant(a.id) { c in
                try c.execute(
                    """
                    INSERT INTO audit_events (tenant_id, id, actor_id, action, object_type, request_id)
                    VALUES ($1, $2, 'mk_x', 'forged', 'tenant', 'req')
                    """, [b.id, Identifier.make(.auditEvent)])
            }
        ) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "42501", "\(error)")  // insufficient_privilege: RLS violation
        }
        XCTAssertThrowsError(
            try env.db.tenant(a.id) { c in
                try c.execute("UPDATE master_keys SET tenant_id = $2 WHERE tenant_id = $1", [a.id, b.id])
            }
        ) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "42501", "\(error)")
        }
        // And without any tenant setting nothing can be written at all.
        XCTAssertThrowsError(
            try env.pool.transaction { c in
                try c.execute(
                    """
                    INSERT INTO audit_events (tenant_id, id, actor_id, action, object_type, request_id)
                    VALUES ($1, $2, 'mk_x', 'forged', 'tenant', 'req')
                    """, [a.id, Identifier.make(.auditEvent)])
            })
        XCTAssertEqual(try env.db.system { c in try count(c, "audit_events") }, all["audit_events"])
    }
}
