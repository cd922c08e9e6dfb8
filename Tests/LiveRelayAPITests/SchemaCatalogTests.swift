import Foundation
import XCTest
import Postgres

/// Keeps deploy/scaling.md true: reads the catalog of a database migrated with every file of
/// `Migrations/` (so tables added later are covered without editing this test) and fails when a
/// tenant table could not be distributed by `tenant_id` on Citus, or is not behind forced
/// row-level security:
/// - every table of the schema has a `tenant_id` column, or is one of the deployment-level
///   tables listed in `deploymentTables` (Citus reference tables);
/// - on a tenant table the primary key, every unique constraint and every unique index include
///   `tenant_id`;
/// - every foreign key of a tenant table to another tenant table pairs `tenant_id` with the
///   referenced `tenant_id` (a co-located join); foreign keys to deployment tables are allowed
///   (distributed → reference), the other way round is not;
/// - every tenant table has row-level security enabled and forced, with at least one policy.
final class SchemaCatalogTests: APITestCase {

    /// Tables that belong to the deployment, not to a tenant (no `tenant_id`; reference tables
    /// on Citus). A new table without `tenant_id` fails the test until it is listed here, with
    /// deploy/scaling.md saying why.
    static let deploymentTables: Set<String> = ["schema_migrations", "operator_keys", "operator_idempotency_records"]

    /// One problem per line, `table: what is wrong`, sorted; empty when the schema follows the plan.
    static func problems(_ c: PostgresConnection, deploymentTables: Set<String>) throws -> [String] {
        let rows = try c.query(
            """
            WITH t AS (
              SELECT c.oid, c.relname::text AS name, c.relrowsecurity AS rls, c.relforcerowsecurity AS forced,
                     (SELECT a.attnum FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped) AS tcol,
                     (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            )
            SELECT t.name AS tbl, 'has no tenant_id column and is not a listed deployment-level table' AS problem
              FROM t WHERE t.tcol IS NULL AND NOT (t.name = ANY($1::text[]))
            UNION ALL
            SELECT t.name, 'row-level security is not enabled' FROM t WHERE t.tcol IS NOT NULL AND NOT t.rls
            UNION ALL
            SELECT t.name, 'row-level security is not forced (the owner bypasses it)' FROM t WHERE t.tcol IS NOT NULL AND NOT t.forced
            UNION ALL
            SELECT t.name, 'has no row-level security policy' FROM t WHERE t.tcol IS NOT NULL AND t.policies = 0
            UNION ALL
            SELECT t.name, 'has no primary key' FROM t
             WHERE t.tcol IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = t.oid AND k.contype = 'p')
            UNION ALL
            SELECT t.name, format('%s %s does not include tenant_id', CASE k.contype WHEN 'p' THEN 'primary key' ELSE 'unique constraint' END,
                                  k.conname)
              FROM t JOIN pg_constraint k ON k.conrelid = t.oid
             WHERE t.tcol IS NOT NULL AND k.contype IN ('p', 'u') AND array_position(k.conkey, t.tcol) IS NULL
            UNION ALL
            SELECT t.name, format('unique index %s does not include tenant_id', ic.relname)
              FROM t JOIN pg_index i ON i.indrelid = t.oid JOIN pg_class ic ON ic.oid = i.indexrelid
             WHERE t.tcol IS NOT NULL AND i.indisunique AND NOT (t.tcol = ANY(i.indkey::int2[]))
            UNION ALL
            SELECT t.name, format('foreign key %s to %s does not pair tenant_id with its tenant_id', k.conname, r.name)
              FROM t JOIN pg_constraint k ON k.conrelid = t.oid AND k.contype = 'f' JOIN t r ON r.oid = k.confrelid
             WHERE t.tcol IS NOT NULL AND r.tcol IS NOT NULL
               AND (array_position(k.conkey, t.tcol) IS NULL
                    OR array_position(k.conkey, t.tcol) IS DISTINCT FROM array_position(k.confkey, r.tcol))
            UNION ALL
            SELECT t.name, format('foreign key %s of a deployment-level table refers to the tenant table %s', k.conname, r.name)
              FROM t JOIN pg_constraint k ON k.conrelid = t.oid AND k.contype = 'f' JOIN t r ON r.oid = k.confrelid
             WHERE t.tcol IS NULL AND r.tcol IS NOT NULL
            """, [PostgresTextArray(deploymentTables.sorted())])
        return try rows.map { "\(try $0.string("tbl")): \(try $0.string("problem"))" }.sorted()
    }

    func testEveryTenantTableIsDistributableByTenantAndBehindForcedRowLevelSecurity() throws {
        let (problems, tenantTables) = try env.pool.withConnection { c in
            (
                try Self.problems(c, deploymentTables: Self.deploymentTables),
                try c.query(
                    """
                    SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
                       AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
                    """)[0].int("n")
            )
        }
        XCTAssertEqual(problems, [], "deploy/scaling.md no longer holds:\n" + problems.joined(separator: "\n"))
        XCTAssertGreaterThanOrEqual(tenantTables, 16, "the check read the migrated schema (tenant tables found: \(tenantTables))")
    }

    /// The check itself: each kind of violation, made on purpose in this test's own database.
    func testTheCatalogCheckReportsEachKindOfViolation() throws {
        let problems = try env.pool.withConnection { c -> [String] in
            try c.simpleQuery(
                """
                CREATE TABLE zz_no_tenant (id text PRIMARY KEY);
                CREATE TABLE zz_pk (tenant_id text NOT NULL, id text NOT NULL, code text, PRIMARY KEY (id), UNIQUE (code));
                CREATE UNIQUE INDEX zz_pk_code_idx ON zz_pk (lower(code));
                CREATE TABLE zz_fk (tenant_id text NOT NULL, id text NOT NULL, pk_id text REFERENCES zz_pk (id),
                                    PRIMARY KEY (tenant_id, id));
                ALTER TABLE zz_fk ENABLE ROW LEVEL SECURITY;
                CREATE TABLE zz_ref (id text PRIMARY KEY, tenant_ref text, owner text,
                                     FOREIGN KEY (tenant_ref, owner) REFERENCES zz_fk (tenant_id, id));
                """)
            return try Self.problems(c, deploymentTables: Self.deploymentTables.union(["zz_ref"]))
                .filter { $0.hasPrefix("zz_") }
        }
        XCTAssertEqual(
            problems,
            [
                "zz_fk: foreign key zz_fk_pk_id_fkey to zz_pk does not pair tenant_id with its tenant_id",
                "zz_fk: has no row-level security policy",
                "zz_fk: row-level security is not forced (the owner bypasses it)",
                "zz_no_tenant: has no tenant_id column and is not a listed deployment-level table",
                "zz_pk: has no row-level security policy",
                "zz_pk: primary key zz_pk_pkey does not include tenant_id",
                "zz_pk: row-level security is not enabled",
                "zz_pk: row-level security is not forced (the owner bypasses it)",
                "zz_pk: unique constraint zz_pk_code_key does not include tenant_id",
                "zz_pk: unique index zz_pk_code_idx does not include tenant_id",
                "zz_pk: unique index zz_pk_code_key does not include tenant_id",
                "zz_pk: unique index zz_pk_pkey does not include tenant_id",
                "zz_ref: foreign key zz_ref_tenant_ref_owner_fkey of a deployment-level table refers to the tenant table zz_fk"
            ])
    }
}
