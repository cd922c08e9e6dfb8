import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres
@testable import LiveRelayApp
import LiveRelayTestSupport

/// docs/templates.md retention through the API and the GC with an injected clock: pins, the 7-day rule,
/// 64 versions / 256 MiB per binding, `409 TEMPLATE_RETENTION_LIMIT`.
final class DeviceRetentionTests: XCTestCase {
    let day: TimeInterval = 86_400

    /// Moves every release of the installation's versions `ago` seconds into the past and
    /// spaces their creation times one minute apart in `order`.
    func backdate(_ env: TestEnvironment, tenant: String, installation: String, order: [String], releasedAgo: TimeInterval) throws {
        try env.db.tenant(tenant) { c in
            for (i, tv) in order.enumerated() {
                try c.execute(
                    """
                    UPDATE template_versions
                       SET created_at = now() - make_interval(mins => $4), released_at = CASE WHEN released_at IS NULL THEN NULL
                                                                                          ELSE now() - make_interval(secs => $5) END
                     WHERE tenant_id = $1 AND installation_id = $2 AND id = $3
                    """, [tenant, installation, tv, 1000 - i, releasedAgo])
            }
        }
    }

    /// Runs `body` in a fresh environment with one tenant and one installation of it; the
    /// environment is torn down afterwards however `body` ends.
    /// - Throws: what the fixtures or `body` throw (`FixtureFailure` when set-up fails).
    func withInstallation(_ body: (TestEnvironment, TestEnvironment.Tenant, Fixtures.Installation) throws -> Void) throws {
        let env = try TestEnvironment.make()
        defer { env.tearDown() }
        let t = try env.tenant()
        try body(env, t, try Fixtures.installation(env, publishable: t.publishable))
    }

    func versionCount(_ env: TestEnvironment, _ tenant: String, _ installation: String) throws -> Int {
        try env.db.tenant(tenant) { c in
            try c.query("SELECT count(*) AS n FROM template_versions WHERE tenant_id = $1 AND installation_id = $2", [tenant, installation])[0].int(
                "n")
        }
    }

    func testSixtyFifthVersionEvictsOldestCollectableElse409() throws {
        try withInstallation { env, t, inst in
            var order: [String] = []
            var st = ""
            for i in 1...64 {
                let p = try Fixtures.prepared(env, inst, Fixtures.prepareBody(digest: "sha256:r\(i)"))
                order.append(p.tv)
                st = p.st
            }
            XCTAssertEqual(try versionCount(env, t.id, inst.id), 64)
            // Versions of another binding do not count against this one.
            XCTAssertEqual(Fixtures.prepare(env, inst, Fixtures.prepareBody(binding: "other")).status, 201)

            // 63 released just now (not collectable) + 1 current: the 65th is refused.
            let refused = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:r65"))
            XCTAssertEqual(refused.status, 409)
            XCTAssertEqual(refused.errorCode, "TEMPLATE_RETENTION_LIMIT")
            XCTAssertEqual(refused.json["error"]?["details"]?["limit"], "versions")
            XCTAssertEqual(refused.json["error"]?["details"]?["versions"], .int(65))
            XCTAssertEqual(refused.json["error"]?["details"]?["binding_id"], "widget")
            XCTAssertNotNil(refused.json["error"]?["details"]?["next_collectable_at"]?.stringValue)
            // The current version did not move.
            XCTAssertEqual(try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: st)?.currentTemplateVersion }, order[63])

            // 6 days 23 hours after release: still not collectable.
            try backdate(env, tenant: t.id, installation: inst.id, order: order, releasedAgo: 6 * day + 23 * 3600)
            XCTAssertEqual(Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:r65")).errorCode, "TEMPLATE_RETENTION_LIMIT")

            // Pin the oldest with a live target: it survives, the next oldest goes.
            let tgt = try Fixtures.liveTarget(env, tenant: t.id, installation: inst.id, templateVersion: order[0], startTarget: st)
            try backdate(env, tenant: t.id, installation: inst.id, order: order, releasedAgo: 7 * day + 60)
            let admitted = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:r65"))
            XCTAssertEqual(admitted.status, 200, String(decoding: admitted.raw, as: UTF8.self))
            XCTAssertEqual(admitted["evicted_template_versions"], .array([.string(order[1])]))
            XCTAssertEqual(admitted["start_target_id"]?.stringValue, st)
            XCTAssertEqual(try versionCount(env, t.id, inst.id), 64 + 1)  // 64 of "widget" + 1 of "other"
            XCTAssertTrue(env.logText.contains("template version evicted"))

            // The target ends: a week later its version is the oldest collectable.
            _ = try env.db.tenant(t.id) { c in
                try c.execute(
                    "UPDATE targets SET status = 'ended', end_reason = 'device', ended_at = now() - interval '8 days' WHERE tenant_id = $1 AND id = $2",
                    [t.id, tgt])
            }
            let next = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:r66"))
            XCTAssertEqual(next["evicted_template_versions"], .array([.string(order[0])]))
        }
    }

    func testAllPinnedIs409AndByteBoundary() throws {
        try withInstallation { env, t, inst in
            let max = 16 * 1024 * 1024
            var order: [String] = []
            var st = ""
            // 16 × 16 MiB = 256 MiB exactly: admitted.
            for i in 1...16 {
                let p = try Fixtures.prepared(env, inst, Fixtures.prepareBody(digest: "sha256:big\(i)", bundleBytes: max))
                order.append(p.tv)
                st = p.st
            }
            // Every version pinned by a live target, and released long ago: 409 (one byte over).
            var targets: [String] = []
            for tv in order {
                targets.append(try Fixtures.liveTarget(env, tenant: t.id, installation: inst.id, templateVersion: tv, startTarget: st))
            }
            try backdate(env, tenant: t.id, installation: inst.id, order: order, releasedAgo: 30 * day)
            let over = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:small", bundleBytes: 1))
            XCTAssertEqual(over.status, 409)
            XCTAssertEqual(over.errorCode, "TEMPLATE_RETENTION_LIMIT")
            XCTAssertEqual(over.json["error"]?["details"]?["limit"], "bytes")
            XCTAssertEqual(over.json["error"]?["details"]?["bytes"], .int(Int64(16 * max + 1)))
            XCTAssertEqual(over.json["error"]?["details"]?["collectable"], .int(0))
            // A zero-byte version still fits (256 MiB is inclusive).
            XCTAssertEqual(Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:empty", bundleBytes: 0)).status, 200)
            // Release the two oldest: the one-byte version evicts only the oldest.
            _ = try env.db.tenant(t.id) { c in
                try c.execute(
                    "UPDATE targets SET status = 'ended', ended_at = now() - interval '8 days' WHERE tenant_id = $1 AND id = ANY($2::text[])",
                    [t.id, PostgresTextArray(Array(targets.prefix(2)))])
            }
            let fits = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:small", bundleBytes: 1))
            XCTAssertEqual(fits.status, 200, String(decoding: fits.raw, as: UTF8.self))
            XCTAssertEqual(fits["evicted_template_versions"], .array([.string(order[0])]))
        }
    }

    func testGCWithInjectedClockKeepsPinnedVersions() throws {
        try withInstallation { env, t, inst in
            let v1 = try Fixtures.prepared(env, inst, Fixtures.prepareBody(digest: "sha256:v1"))
            let v2 = try Fixtures.prepared(env, inst, Fixtures.prepareBody(digest: "sha256:v2"))
            let v3 = try Fixtures.prepared(env, inst, Fixtures.prepareBody(digest: "sha256:v3"))
            let st = v1.st
            let tgt = try Fixtures.liveTarget(env, tenant: t.id, installation: inst.id, templateVersion: v1.tv, startTarget: st)
            func ids(_ r: [CollectedVersion]) -> [String] { r.map(\.id) }
            func collect(after: TimeInterval, dryRun: Bool = false) throws -> [CollectedVersion] {
                try RetentionStore.collect(env.db, now: Date().addingTimeInterval(after), dryRun: dryRun)
            }

            // v1 pinned by a live target, v3 by the start target: only v2 may go, after 7 days.
            XCTAssertEqual(ids(try collect(after: 6 * day + 23 * 3600)), [])
            XCTAssertEqual(ids(try collect(after: 7 * day + 60, dryRun: true)), [v2.tv])
            XCTAssertEqual(try versionCount(env, t.id, inst.id), 3)  // dry run deleted nothing

            // An unrevoked sender key naming the start target keeps its current version after the
            // binding retires.
            let key = try Fixtures.senderKey(env, master: t.master, targets: [st])
            XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/bindings/widget/retire", [:], as: inst.credential).status, 200)
            let removed = try collect(after: 7 * day + 60)
            XCTAssertEqual(ids(removed), [v2.tv])
            XCTAssertEqual(removed.first?.bindingId, "widget")
            XCTAssertEqual(removed.first?.tenantId, t.id)
            XCTAssertEqual(try versionCount(env, t.id, inst.id), 2)

            // The target ends now: its version goes 7 days later, not at 6d23h.
            _ = try env.db.tenant(t.id) { c in
                try c.execute(
                    "UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = now() WHERE tenant_id = $1 AND id = $2", [t.id, tgt])
            }
            XCTAssertEqual(ids(try collect(after: 6 * day + 23 * 3600)), [])
            XCTAssertEqual(ids(try collect(after: 7 * day + 60)), [v1.tv])

            // Revoking the sender key releases the last one; the maintenance service removes it
            // (with an injected clock) and logs it.
            XCTAssertEqual(env.call("POST", "/v1/remote-updates/sender-keys/\(key.id)/revoke", [:], as: t.master).status, 200)
            XCTAssertEqual(ids(try collect(after: 6 * day + 23 * 3600)), [])
            let lines = LineCapture()
            let svc = MaintenanceService(
                db: env.db, log: Logger(minimum: .info, sink: { lines.append($0) }), interval: 3600,
                now: { Date().addingTimeInterval(7 * 86_400 + 60) })
            XCTAssertEqual(ids(svc.runOnce()), [v3.tv])
            XCTAssertTrue(lines.text.contains("gc: template version removed"))
            XCTAssertTrue(lines.text.contains(v3.tv))
            XCTAssertTrue(lines.text.contains("gc: pass finished"))
            XCTAssertEqual(try versionCount(env, t.id, inst.id), 0)
            // start/stop without waiting for a pass.
            svc.start()
            svc.stop()
        }
    }

    func testGCLineFormat() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let v = CollectedVersion(
            tenantId: "ten_1", installationId: "ins_1", bindingId: "widget", id: "tv_x", bytes: 12,
            createdAt: now, lastReferenceEndedAt: now, collectableAt: now.addingTimeInterval(7 * 86_400))
        let line = GCCommand.json(v, dryRun: true)
        XCTAssertEqual(line["action"], "would_remove")
        XCTAssertEqual(line["template_version"], "tv_x")
        XCTAssertEqual(line["collectable_since"], .string(Timestamp.format(now.addingTimeInterval(7 * 86_400))))
        XCTAssertEqual(GCCommand.json(v, dryRun: false)["action"], "removed")
    }
}
