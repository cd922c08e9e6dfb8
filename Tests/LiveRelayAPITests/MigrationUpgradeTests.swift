import Foundation
import XCTest
import LiveRelayStore
import LiveRelayTestSupport
import Postgres

/// Migrations applied to a database that already holds rows, as an upgrade meets them: the
/// migrations run as the product's role, under forced row-level security, so a backfill that
/// does not take the system scope sees no tenant's rows.
final class MigrationUpgradeTests: XCTestCase {
    private var database: TestDatabase!
    private var directory: URL!

    override func setUpWithError() throws {
        database = try TestDatabase(prefix: "lr_upgrade", migrated: false)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("lr-upgrade-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        database?.drop()
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    /// Copies the repository's migrations numbered up to `last` into the scratch directory.
    private func copyMigrations(through last: Int) throws {
        let source = URL(fileURLWithPath: TestDatabase.repoRoot + "/Migrations")
        for name in try FileManager.default.contentsOfDirectory(atPath: source.path) where name.hasSuffix(".sql") {
            guard let number = Int(name.prefix(4)), number <= last else { continue }
            let target = directory.appendingPathComponent(name)
            if !FileManager.default.fileExists(atPath: target.path) {
                try FileManager.default.copyItem(at: source.appendingPathComponent(name), to: target)
            }
        }
    }

    /// A pool (closed at tear-down) and database over the scratch database with the
    /// repository's migrations up to `last` applied.
    private func migrated(through last: Int) throws -> (PostgresPool, Database) {
        try copyMigrations(through: last)
        let pool = PostgresPool(conninfo: database.conninfo, maxConnections: 1)
        addTeardownBlock { pool.close() }
        XCTAssertFalse(try Migrator(directory: directory).migrate(pool: pool).isEmpty, "0001–\(last) applied")
        return (pool, Database(pool: pool))
    }

    /// A tenant `tenant` with a publishable key and one iOS installation `installation`, written
    /// as the product writes them (the installation through `InstallationStore`).
    private func seedTenant(_ db: Database, _ tenant: String, installation: String) throws {
        try db.system { c in
            try c.execute("INSERT INTO tenants (tenant_id, name, daily_push_quota) VALUES ($1, 'Acme', 100)", [tenant])
            try c.execute("INSERT INTO publishable_keys (tenant_id, id, secret_hash) VALUES ($1, 'pk_test', 'x')", [tenant])
        }
        try db.tenant(tenant) { c in
            _ = try InstallationStore.insert(
                c, tenantId: tenant, id: installation, publishableKeyId: "pk_test", appId: "com.example.app",
                platform: "ios", environment: "sandbox", installId: UUID().uuidString, fcmToken: nil)
        }
    }

    /// Migration 0021 (docs/write-path.md "HOT updates"): a terminal target written before it,
    /// without `ended_at`, gets its `updated_at` as `ended_at`, in every tenant, and the upgrade
    /// then passes the new CHECK constraint.
    func testTerminalTargetsWithoutEndedAtAreBackfilledAcrossTenants() throws {
        let (pool, db) = try migrated(through: 20)
        var targets: [(tenant: String, id: String)] = []
        for n in 1...2 {
            let tenant = "ten_upgrade\(n)", inst = "ins_upgrade\(n)", target = "tgt_upgrade\(n)"
            try seedTenant(db, tenant, installation: inst)
            try db.tenant(tenant) { c in
                try c.execute(
                    """
                    INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                         token_status, op_seq, updated_at, ended_at)
                    VALUES ($1, $2, $3, 'local', 'delivery', 'tv_test', $4, 1, '{"eta": 1}'::jsonb, 'pending', 0,
                            '2026-01-02T03:04:05Z', NULL)
                    """, [tenant, target, inst, n == 1 ? "ended" : "creation_failed"])
            }
            targets.append((tenant, target))
        }

        try copyMigrations(through: 21)
        XCTAssertEqual(try Migrator(directory: directory).migrate(pool: pool), ["0021_targets_hot_updates"])
        for t in targets {
            let row = try db.system { c in
                try c.query("SELECT ended_at, updated_at FROM targets WHERE tenant_id = $1 AND id = $2", [t.tenant, t.id])[0]
            }
            XCTAssertEqual(try row.date("ended_at"), try row.date("updated_at"), "\(t.tenant): ended_at backfilled from updated_at")
        }
    }

    /// Migrations 0024 and 0026 (docs/delivery.md "Claims", docs/priority-budget.md): each
    /// target's last APNs timestamp and priority-10 window move from `targets` to
    /// `target_clocks`, in every tenant; a target never sent gets no row (its clock reads 0).
    func testClocksAndWindowsMoveToTargetClocksAcrossTenants() throws {
        let (pool, db) = try migrated(through: 23)
        for n in 1...2 {
            let tenant = "ten_clock\(n)", inst = "ins_clock\(n)"
            try seedTenant(db, tenant, installation: inst)
            try db.tenant(tenant) { c in
                for (suffix, ts, window) in [("sent", 1_700_000_000 + n, "{1,2,3}"), ("window", 0, "{7}"), ("never", 0, "{}")] {
                    try c.execute(
                        """
                        INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                             token_status, op_seq, last_timestamp, priority10_sends)
                        VALUES ($1, $2, $3, 'local', 'delivery', 'tv_test', 'ready', 1, '{"eta": 1}'::jsonb, 'pending', 0, $4, $5::bigint[])
                        """, [tenant, "tgt_\(suffix)\(n)", inst, ts, window])
                }
            }
        }

        try copyMigrations(through: 26)
        XCTAssertEqual(
            try Migrator(directory: directory).migrate(pool: pool),
            ["0024_target_clocks", "0025_insert_head_check_probe", "0026_priority10_window_beside_the_clock"])
        let rows = try db.system { c in
            try c.query("SELECT tenant_id, target_id, last_timestamp, priority10_sends::text AS w FROM target_clocks ORDER BY tenant_id, target_id")
                .map { "\(try $0.string("tenant_id")) \(try $0.string("target_id")) \(try $0.int64("last_timestamp")) \(try $0.string("w"))" }
        }
        XCTAssertEqual(
            rows,
            [
                "ten_clock1 tgt_sent1 1700000001 {1,2,3}", "ten_clock1 tgt_window1 0 {7}",
                "ten_clock2 tgt_sent2 1700000002 {1,2,3}", "ten_clock2 tgt_window2 0 {7}"
            ])
        let columns = try db.system { c in
            try c.query(
                "SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = 'targets' AND column_name IN ('last_timestamp', 'priority10_sends')"
            )[0].int("n")
        }
        XCTAssertEqual(columns, 0, "targets no longer carries either column")
    }
}
