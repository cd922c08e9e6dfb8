import Foundation
import XCTest
import JSON
import Logging
import LiveRelayCore
@testable import LiveRelayStore
import Postgres
@testable import LiveRelayApp
import LiveRelayTestSupport

/// Issue 14 through the real binary and a real embedded cluster (docs/security.md): the role
/// check at start, `liverelay gc` retention, and the embedded PostgreSQL refusing other local
/// users (and living under /var/lib/liverelay when the home is out of the postgres user's reach).
final class HardeningCLITests: XCTestCase {
    var env: CLIEnvironment?
    override func tearDown() { env?.tearDown() }

    func testASuperuserDatabaseRoleIsRefusedUnlessAllowed() throws {
        let env = try CLIEnvironment.make()
        self.env = env
        let admin = try XCTUnwrap(ProcessInfo.processInfo.environment["LIVERELAY_TEST_ADMIN_DATABASE_URL"])
        let superURL = admin + (admin.contains("?") ? "&" : "?") + "dbname=\(env.database.name)"
        let kek = Data(env.kek).base64EncodedString()
        let refused = try env.run(["admin", "tenants", "list"], env: ["DATABASE_URL": superURL, "LIVERELAY_KEK": kek])
        XCTAssertNotEqual(refused.status, 0, refused.stdout)
        XCTAssertTrue(refused.stderr.contains("SUPERUSER"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("row-level security"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("LIVERELAY_ALLOW_PRIVILEGED_ROLE=1"), refused.stderr)
        XCTAssertTrue(
            refused.stderr.split(separator: "\n").contains { $0.contains("SUPERUSER") && $0.contains("LIVERELAY_ALLOW_PRIVILEGED_ROLE=1") },
            "one line says why: \(refused.stderr)")
        let allowed = try env.run(
            ["admin", "tenants", "list"],
            env: [
                "DATABASE_URL": superURL, "LIVERELAY_KEK": kek,
                "LIVERELAY_ALLOW_PRIVILEGED_ROLE": "1"
            ])
        XCTAssertEqual(allowed.status, 0, allowed.stderr)
        let ordinary = try env.admin(["tenants", "list"])
        XCTAssertEqual(ordinary.status, 0, ordinary.stderr)
        XCTAssertEqual(RolePrivileges(role: "r", superuser: false, bypassRLS: true).refusal?.contains("BYPASSRLS"), true)
        XCTAssertNil(RolePrivileges(role: "r", superuser: false, bypassRLS: false).refusal)
    }

    func testGCPurgesTargetsPastTheRetentionDays() throws {
        let env = try CLIEnvironment.make()
        self.env = env
        let w = try env.world()
        let target = "tgt_" + Identifier.makeBody()
        try env.db.tenant(w.tenantId) { c in
            let inst = try c.query("SELECT installation_id FROM start_targets WHERE tenant_id = $1 AND id = $2", [w.tenantId, w.startTarget])[0]
                .string("installation_id")
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, start_target_id, origin, activity_type, template_version, status,
                                     end_reason, state, ended_at)
                VALUES ($1, $2, $3, $4, 'remote', 'delivery', $5, 'ended', 'sender', '{}'::jsonb, now() - interval '40 days')
                """, [w.tenantId, target, inst, w.startTarget, w.templateVersion])
        }
        func exists() throws -> Bool {
            try env.db.system { c in try !c.query("SELECT 1 AS one FROM targets WHERE id = $1", [target]).isEmpty }
        }
        let base = ["DATABASE_URL": env.conninfo, "LIVERELAY_KEK": Data(env.kek).base64EncodedString()]
        func summary(_ args: [String], _ extra: [String: String] = [:]) throws -> JSONValue {
            let r = try env.run(["gc"] + args, env: base.merging(extra) { $1 })
            XCTAssertEqual(r.status, 0, r.stderr)
            return try XCTUnwrap(r.stdout.split(separator: "\n").compactMap { try? JSONValue.parse(Array($0.utf8)) }.last?["summary"])
        }
        XCTAssertEqual(try summary([], ["LIVERELAY_RETENTION_DAYS": "41"])["targets"]?.intValue, 0, "40 days old, 41 days kept")
        let dry = try summary(["--dry-run"])
        XCTAssertEqual(dry["targets"]?.intValue, 1)
        XCTAssertEqual(dry["retention_days"]?.intValue, 30)
        XCTAssertTrue(try exists(), "a dry run deletes nothing")
        XCTAssertEqual(try summary([])["targets"]?.intValue, 1)
        XCTAssertFalse(try exists())
    }

    // MARK: embedded PostgreSQL

    func runuser(_ user: String, _ argv: [String]) throws -> (Int32, String) {
        try Subprocess.run(["/usr/sbin/runuser", "-u", user, "--"] + argv)
    }

    func testTheEmbeddedClusterRefusesOtherLocalUsers() throws {
        XCTAssertEqual(getuid(), 0, "this test acts as other local users (runuser): run the suite as root, as deploy/local/test does")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("lr-embedded-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        let lines = LineCapture()
        let pg = EmbeddedPostgres(home: base.appendingPathComponent("home"), log: Logger(minimum: .info, sink: { lines.append($0) }))
        try pg.start()
        defer { pg.stop() }
        XCTAssertTrue(pg.root.path.hasPrefix(base.path), "a reachable home keeps its cluster: \(pg.root.path)")

        // The service: role liverelay, neither superuser nor BYPASSRLS.
        let c = try PostgresConnection(pg.conninfo)
        let me = try c.query("SELECT current_user::text AS u, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")[0]
        c.close()
        XCTAssertEqual(try me.string("u"), "liverelay")
        XCTAssertFalse(try me.bool("rolsuper"))
        XCTAssertFalse(try me.bool("rolbypassrls"))

        // Another local user gets nowhere, as either role.
        let psql = try EmbeddedPostgres.binDir() + "/psql"
        for (role, db) in [("postgres", "postgres"), ("liverelay", "liverelay")] {
            let (status, out) = try runuser("nobody", [psql, "-X", "-h", pg.socketDir, "-U", role, "-d", db, "-c", "SELECT 1"])
            XCTAssertNotEqual(status, 0, "nobody connected as \(role): \(out)")
            XCTAssertTrue(out.contains("Permission denied"), out)
        }
        var st = stat()
        XCTAssertEqual(stat(pg.socketDir, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700)
        XCTAssertEqual(String(cString: getpwuid(st.st_uid).pointee.pw_name), "postgres")
        XCTAssertEqual(stat(pg.socketDir + "/.s.PGSQL.5432", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700, "unix_socket_permissions = 0700")
        let hba = try String(contentsOfFile: pg.dataDir + "/pg_hba.conf", encoding: .utf8)
        XCTAssertFalse(hba.split(separator: "\n").contains { !$0.hasPrefix("#") && $0.contains("trust") }, hba)
        // Even with the directory opened up, peer authentication has no mapping for nobody.
        chmod(pg.root.path, 0o755)
        chmod(pg.socketDir, 0o755)
        chmod(pg.socketDir + "/.s.PGSQL.5432", 0o777)
        let (status, out) = try runuser("nobody", [psql, "-X", "-h", pg.socketDir, "-U", "postgres", "-d", "postgres", "-c", "SELECT 1"])
        XCTAssertNotEqual(status, 0, out)
        XCTAssertTrue(out.contains("Peer authentication failed") || out.contains("no pg_hba.conf entry"), out)
    }

    func testAHomeThePostgresUserCannotReachMovesTheClusterUnderVarLibLiverelay() throws {
        XCTAssertEqual(getuid(), 0, "run the suite as root, as deploy/local/test does")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("lr-private-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: base) }
        let home = base.appendingPathComponent("clone/.liverelay")
        let lines = LineCapture()
        let pg = EmbeddedPostgres(home: home, log: Logger(minimum: .info, sink: { lines.append($0) }))
        try pg.start()
        defer {
            pg.stop()
            try? FileManager.default.removeItem(at: pg.root.deletingLastPathComponent())
        }
        XCTAssertEqual(pg.root.path, EmbeddedPostgres.relocatedRoot(for: home).path)
        XCTAssertTrue(pg.root.path.hasPrefix("/var/lib/liverelay/"), pg.root.path)
        XCTAssertEqual(lines.text.components(separatedBy: "embedded PostgreSQL lives in \(pg.root.path)").count, 2, lines.text)
        let c = try PostgresConnection(pg.conninfo)
        XCTAssertEqual(try c.query("SELECT current_user::text AS u")[0].string("u"), "liverelay")
        c.close()
        // The same working directory finds the same cluster again.
        let again = EmbeddedPostgres(home: home, log: Logger(minimum: .info, sink: { _ in }))
        try again.start()
        XCTAssertEqual(again.root.path, pg.root.path)
        XCTAssertFalse(again.startedHere, "already running")
    }
}
