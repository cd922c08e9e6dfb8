import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import LiveRelayTestSupport

/// Objects the tenancy tests need, made through the API where it exists and straight in the
/// database where a later endpoint will make them (start targets).
enum Fixtures {
    struct Key { let id: String; let credential: String }
    struct Installation { let id: String; let credential: String }

    /// A ready start target row for `tenant` (binding + template version + start target).
    static func startTarget(_ env: TestEnvironment, tenant: String) throws -> String {
        let pub = try env.db.system { c in
            try c.query("SELECT id FROM publishable_keys WHERE tenant_id = $1 LIMIT 1", [tenant])[0].string("id")
        }
        let inst = Identifier.make(.installation), st = Identifier.make(.startTarget)
        try env.db.tenant(tenant) { c in
            try c.execute(
                """
                INSERT INTO installations (tenant_id, id, publishable_key_id, app_id, platform, environment, install_id)
                VALUES ($1, $2, $3, 'com.example.app', 'ios', 'sandbox', $4)
                """, [tenant, inst, pub, UUID().uuidString])
            try c.execute("INSERT INTO bindings (tenant_id, installation_id, id) VALUES ($1, $2, 'bnd_widget')", [tenant, inst])
            try c.execute(
                """
                INSERT INTO template_versions (tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest,
                                               bundle_bytes, bundle_modules, bundle_files)
                VALUES ($1, $2, 'bnd_widget', 'tv_test', 'delivery', 'DeliveryAttributes', 'sha256:00', 10, 1, 1)
                """, [tenant, inst])
            try c.execute(
                """
                INSERT INTO start_targets (tenant_id, id, installation_id, binding_id, activity_type, current_template_version, push_to_start_token, status)
                VALUES ($1, $2, $3, 'bnd_widget', 'delivery', 'tv_test', 'feed', 'ready')
                """, [tenant, st, inst])
        }
        return st
    }

    static func senderKey(
        _ env: TestEnvironment, master: String, targets: [String], createdFrom: [String] = [],
        permissions: [String] = Permission.allCases.map(\.rawValue)
    ) throws -> Key {
        let r = env.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": .array(targets.map(JSONValue.string)), "created_from": .array(createdFrom.map(JSONValue.string)),
                "permissions": .array(permissions.map(JSONValue.string)), "idempotency_key": .string(UUID().uuidString)
            ], as: master)
        guard r.status == 201, let id = r["id"]?.stringValue, let cred = r["credential"]?.stringValue else {
            throw FixtureFailure("sender key creation failed: \(r.status) \(String(decoding: r.raw, as: UTF8.self))")
        }
        return Key(id: id, credential: cred)
    }

    /// A new master key's id (its credential discarded).
    static func masterKey(_ env: TestEnvironment, master: String) throws -> String {
        let r = env.call("POST", "/v1/master-keys", ["label": "spare", "idempotency_key": .string(UUID().uuidString)], as: master)
        guard r.status == 201, let id = r["id"]?.stringValue else { throw FixtureFailure("master key creation failed: \(r.status)") }
        return id
    }

    static func installation(_ env: TestEnvironment, publishable: String, platform: String = "ios") throws -> Installation {
        let r = env.call(
            "POST", "/v1/installations",
            [
                "platform": .string(platform), "app_id": "com.example.app",
                "environment": "sandbox", "install_id": .string(UUID().uuidString)
            ], as: publishable)
        guard r.status == 201, let id = r["installation_id"]?.stringValue, let cred = r["credential"]?.stringValue else {
            throw FixtureFailure("installation registration failed: \(r.status) \(String(decoding: r.raw, as: UTF8.self))")
        }
        return Installation(id: id, credential: cred)
    }
}

// MARK: device registry (prepare, start targets)

extension Fixtures {
    /// A delivery-tracking schema used by the device tests.
    static let deliverySchema: JSONValue = .object([
        "type": "object", "required": ["eta"],
        "properties": .object([
            "eta": .object(["type": "string", "maxLength": 20]),
            "stops": .object(["type": "array", "items": .object(["type": "integer"])])
        ])
    ])

    /// A valid prepare body; `edit` changes it.
    static func prepareBody(
        binding: String = "widget", activityType: String = "delivery", digest: String = "sha256:r1",
        schema: JSONValue? = Fixtures.deliverySchema, bundleBytes: Int = 1000,
        _ edit: (inout [String: JSONValue]) -> Void = { _ in }
    ) -> JSONValue {
        var o: [String: JSONValue] = [
            "binding_id": .string(binding), "activity_type": .string(activityType), "attributes_type": "DeliveryAttributes",
            "renderer_digest": .string(digest),
            "bundle": .object(["bytes": .int(Int64(bundleBytes)), "modules": 3, "files": 4])
        ]
        if let schema { o["schema"] = schema }
        edit(&o)
        return .object(o)
    }

    /// `POST /v1/installations/{id}/start-targets` as the installation.
    static func prepare(_ env: TestEnvironment, _ inst: Installation, _ body: JSONValue) -> TestEnvironment.Reply {
        env.call("POST", "/v1/installations/\(inst.id)/start-targets", body, as: inst.credential)
    }

    /// Prepares and returns (start_target_id, template_version); fails the test on a non-2xx.
    static func prepared(
        _ env: TestEnvironment, _ inst: Installation, _ body: JSONValue,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> (st: String, tv: String) {
        let r = prepare(env, inst, body)
        guard r.status == 200 || r.status == 201, let st = r["start_target_id"]?.stringValue, let tv = r["template_version"]?.stringValue else {
            XCTFail("prepare failed: \(r.status) \(String(decoding: r.raw, as: UTF8.self))", file: file, line: line)
            throw FixtureFailure("prepare failed")
        }
        return (st, tv)
    }

    /// A live target row of `installation` using `templateVersion` (straight in the database;
    /// the lifecycle endpoints make them in production).
    static func liveTarget(
        _ env: TestEnvironment, tenant: String, installation: String, templateVersion: String,
        startTarget: String? = nil, revision: Int64 = 1, status: String = "ready"
    ) throws -> String {
        let id = Identifier.make(.target)
        _ = try env.db.tenant(tenant) { c in
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, start_target_id, origin, activity_type, template_version, status,
                                     revision, state)
                VALUES ($1, $2, $3, $4, $5, 'delivery', $6, $7, $8, '{}'::jsonb)
                """, [tenant, id, installation, startTarget, startTarget == nil ? "local" : "remote", templateVersion, status, revision])
        }
        return id
    }
}
