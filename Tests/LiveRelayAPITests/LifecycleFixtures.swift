import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// A tenant with one installation, a ready start target (optionally with a pinned schema) and
/// a sender key covering it, for the lifecycle tests. Start targets are made straight in the
/// database so these tests do not depend on the prepare endpoint.
struct LifecycleWorld {
    let env: TestEnvironment
    let tenant: TestEnvironment.Tenant
    let installationId: String
    let installationCredential: String
    let startTargetId: String
    let templateVersion: String
    let sender: Fixtures.Key

    static func make(
        _ env: TestEnvironment, platform: String = "ios", schema: JSONValue? = nil, quota: Int64 = 1000,
        ready: Bool = true, permissions: [String] = Permission.allCases.map(\.rawValue)
    ) throws -> LifecycleWorld {
        let t = try env.tenant(quota: quota)
        let inst = try Fixtures.installation(env, publishable: t.publishable, platform: platform)
        let st = Identifier.make(.startTarget), tv = "tv_" + Identifier.makeBody()
        try env.db.tenant(t.id) { c in
            if platform == "android" {
                try c.execute("UPDATE installations SET fcm_token = 'fcm-test-token' WHERE tenant_id = $1 AND id = $2", [t.id, inst.id])
            }
            try c.execute("INSERT INTO bindings (tenant_id, installation_id, id) VALUES ($1, $2, 'bnd_widget')", [t.id, inst.id])
            try c.execute(
                """
                INSERT INTO template_versions (tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest,
                                               schema, bundle_bytes, bundle_modules, bundle_files)
                VALUES ($1, $2, 'bnd_widget', $3, 'delivery', 'DeliveryAttributes', 'sha256:00', $4::jsonb, 10, 1, 1)
                """, [t.id, inst.id, tv, schema?.jsonString])
            try c.execute(
                """
                INSERT INTO start_targets (tenant_id, id, installation_id, binding_id, activity_type, current_template_version, push_to_start_token, status)
                VALUES ($1, $2, $3, 'bnd_widget', 'delivery', $4, $5, $6)
                """, [t.id, st, inst.id, tv, ready && platform == "ios" ? "a1b2c3" : nil, ready ? "ready" : "pending"])
        }
        let key = try Fixtures.senderKey(env, master: t.master, targets: [st], createdFrom: [st], permissions: permissions)
        return LifecycleWorld(
            env: env, tenant: t, installationId: inst.id, installationCredential: inst.credential,
            startTargetId: st, templateVersion: tv, sender: key)
    }

    func startBody(_ state: JSONValue = ["eta": 10], key: String = UUID().uuidString, extra: [String: JSONValue] = [:]) -> JSONValue {
        var o: [String: JSONValue] = [
            "start_target_id": .string(startTargetId), "template_version": .string(templateVersion),
            "state": state, "alert": ["title": "Preparing", "body": "Your order is being prepared"],
            "idempotency_key": .string(key)
        ]
        for (k, v) in extra { o[k] = v }
        return .object(o)
    }

    /// Starts an activity and returns its target id (asserting 202).
    func start(_ state: JSONValue = ["eta": 10], extra: [String: JSONValue] = [:], file: StaticString = #filePath, line: UInt = #line) -> String {
        let r = env.call("POST", "/v1/remote-updates/live-activities/start", startBody(state, extra: extra), as: sender.credential)
        XCTAssertEqual(r.status, 202, String(decoding: r.raw, as: UTF8.self), file: file, line: line)
        return r["target"]?["id"]?.stringValue ?? ""
    }

    func update(
        _ target: String, _ state: JSONValue, revision: Int64, as cred: String? = nil, extra: [String: JSONValue] = [:]
    ) -> TestEnvironment.Reply {
        var o: [String: JSONValue] = [
            "target_id": .string(target), "state": state, "expected_revision": .int(revision),
            "idempotency_key": .string(UUID().uuidString)
        ]
        for (k, v) in extra { o[k] = v }
        return env.call("POST", "/v1/remote-updates/live-activities/update", .object(o), as: cred ?? sender.credential)
    }
}
