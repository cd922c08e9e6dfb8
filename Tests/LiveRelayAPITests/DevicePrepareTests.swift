import Foundation
import XCTest
import Crypto
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md prepare (`POST /v1/installations/{id}/start-targets`), §6 version derivation, §7
/// manifest limits, through the HTTP API over a real PostgreSQL.
final class DevicePrepareTests: APITestCase {
    func testPrepareIsIdempotentAndDerivesVersions() throws {
        let t = try env.tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)

        let first = Fixtures.prepare(env, inst, Fixtures.prepareBody())
        XCTAssertEqual(first.status, 201, String(decoding: first.raw, as: UTF8.self))
        let st = try XCTUnwrap(first["start_target_id"]?.stringValue)
        let tv = try XCTUnwrap(first["template_version"]?.stringValue)
        XCTAssertTrue(Identifier.isValid(st, kind: .startTarget))
        XCTAssertEqual(first["id"]?.stringValue, st)
        XCTAssertEqual(first["status"], "pending")
        XCTAssertEqual(first["push_to_start_token_registered"], .bool(false))
        XCTAssertEqual(first["binding_id"], "widget")
        XCTAssertEqual(first["installation_id"]?.stringValue, inst.id)
        // The id is docs/templates.md's derivation, computed independently.
        XCTAssertEqual(
            tv,
            TemplateVersion.derive(
                bindingId: "widget", activityType: "delivery", attributesType: "DeliveryAttributes",
                rendererDigest: "sha256:r1", schema: Fixtures.deliverySchema, resources: [],
                sha256: Digest.sha256))
        XCTAssertTrue(tv.hasPrefix("tv_") && tv.count == 55)

        // Same content again → 200, same ids, nothing new stored.
        let again = Fixtures.prepare(env, inst, Fixtures.prepareBody())
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(again["start_target_id"]?.stringValue, st)
        XCTAssertEqual(again["template_version"]?.stringValue, tv)

        // Key order of the schema and order of resources are irrelevant; bundle counts are not hashed.
        let r1: JSONValue = ["path": "img/a.png", "sha256": .string(String(repeating: "a", count: 64)), "bytes": 10]
        let r2: JSONValue = ["path": "img/b.png", "sha256": .string(String(repeating: "b", count: 64)), "bytes": 20]
        let reordered = try JSONValue.parse(
            #"{"properties":{"stops":{"items":{"type":"integer"},"type":"array"},"eta":{"maxLength":20,"type":"string"}},"required":["eta"],"type":"object"}"#
        )
        let withRes = Fixtures.prepareBody { $0["resources"] = [r1, r2] }
        let withResReordered = Fixtures.prepareBody(schema: reordered) { $0["resources"] = [r2, r1] }
        let a = try Fixtures.prepared(env, inst, withRes)
        let b = try Fixtures.prepared(env, inst, withResReordered)
        XCTAssertEqual(a.st, st)
        XCTAssertEqual(a.tv, b.tv)
        XCTAssertNotEqual(a.tv, tv)

        // A schema change → a new version, same start target; the old one stays stored.
        let changed = Fixtures.prepareBody(schema: ["type": "object", "properties": ["eta": ["type": "string", "maxLength": 21]]])
        let c = Fixtures.prepare(env, inst, changed)
        XCTAssertEqual(c.status, 200)
        XCTAssertEqual(c["start_target_id"]?.stringValue, st)
        let tv2 = try XCTUnwrap(c["template_version"]?.stringValue)
        XCTAssertNotEqual(tv2, tv)
        XCTAssertNotEqual(tv2, a.tv)

        // Another activity type of the same binding → another start target.
        let other = Fixtures.prepare(env, inst, Fixtures.prepareBody(activityType: "pickup"))
        XCTAssertEqual(other.status, 201)
        XCTAssertNotEqual(other["start_target_id"]?.stringValue, st)

        // Going back to earlier content gives the earlier version again.
        XCTAssertEqual(try Fixtures.prepared(env, inst, Fixtures.prepareBody()).tv, tv)

        let stored = try env.db.tenant(t.id) { c in
            try c.query(
                "SELECT id, released_at IS NULL AS current FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 ORDER BY id",
                [t.id, inst.id]
            ).map { (try $0.string("id"), try $0.bool("current")) }
        }
        XCTAssertEqual(stored.count, 4)  // tv, a.tv, tv2, pickup's
        XCTAssertEqual(Set(stored.filter(\.1).map(\.0)), [tv, try XCTUnwrap(other["template_version"]?.stringValue)])
        // The stored version carries what start/update need.
        let rec = try env.db.tenant(t.id) { c in try TemplateStore.get(c, tenantId: t.id, installationId: inst.id, id: tv) }
        XCTAssertEqual(rec?.schema, Fixtures.deliverySchema)
        XCTAssertEqual(rec?.attributesType, "DeliveryAttributes")
        XCTAssertEqual(rec?.bundleBytes, 1000)

        // Preparing starts nothing.
        let targets = try env.db.tenant(t.id) { c in try c.query("SELECT count(*) AS n FROM targets WHERE tenant_id = $1", [t.id])[0].int("n") }
        XCTAssertEqual(targets, 0)
    }

    func testIdempotencyKeyReplays() throws {
        let t = try env.tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let body = Fixtures.prepareBody { $0["idempotency_key"] = "prep-1" }
        let first = Fixtures.prepare(env, inst, body)
        XCTAssertEqual(first.status, 201)
        let replay = Fixtures.prepare(env, inst, body)
        XCTAssertEqual(replay.status, 201, "the original status again")
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay["start_target_id"], first["start_target_id"])
        let reused = Fixtures.prepare(env, inst, Fixtures.prepareBody(digest: "sha256:other") { $0["idempotency_key"] = "prep-1" })
        XCTAssertEqual(reused.status, 422)
        XCTAssertEqual(reused.errorCode, "IDEMPOTENCY_KEY_REUSED")
    }

    func assertInvalid(
        _ r: TestEnvironment.Reply, field: String, limit: Int? = nil, actual: Int? = nil, code: String = "INVALID_REQUEST",
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(r.status, 400, String(decoding: r.raw, as: UTF8.self), file: file, line: line)
        XCTAssertEqual(r.errorCode, code, file: file, line: line)
        XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field, file: file, line: line)
        if let limit { XCTAssertEqual(r.json["error"]?["details"]?["limit"], .int(Int64(limit)), file: file, line: line) }
        if let actual { XCTAssertEqual(r.json["error"]?["details"]?["actual"], .int(Int64(actual)), file: file, line: line) }
    }

    func testManifestBoundaries() throws {
        let t = try env.tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        func prep(_ edit: (inout [String: JSONValue]) -> Void) -> TestEnvironment.Reply {
            Fixtures.prepare(env, inst, Fixtures.prepareBody(binding: "b-\(UUID().uuidString)", edit))
        }
        func bundle(_ bytes: Int, _ modules: Int, _ files: Int) -> JSONValue {
            ["bytes": .int(Int64(bytes)), "modules": .int(Int64(modules)), "files": .int(Int64(files))]
        }
        XCTAssertEqual(prep { $0["bundle"] = bundle(16_777_216, 256, 512) }.status, 201)
        assertInvalid(prep { $0["bundle"] = bundle(16_777_217, 1, 1) }, field: "bundle.bytes", limit: 16_777_216, actual: 16_777_217)
        assertInvalid(prep { $0["bundle"] = bundle(1, 257, 1) }, field: "bundle.modules", limit: 256, actual: 257)
        assertInvalid(prep { $0["bundle"] = bundle(1, 1, 513) }, field: "bundle.files", limit: 512, actual: 513)
        assertInvalid(prep { $0["bundle"] = bundle(-1, 1, 1) }, field: "bundle.bytes")
        assertInvalid(prep { $0["bundle"] = ["bytes": 1, "modules": 1] }, field: "bundle.files")

        func resource(_ i: Int) -> JSONValue { ["path": .string("r/\(i).png"), "sha256": .string(String(repeating: "c", count: 64)), "bytes": 1] }
        XCTAssertEqual(prep { $0["resources"] = .array((0..<254).map(resource)) }.status, 201)
        assertInvalid(prep { $0["resources"] = .array((0..<255).map(resource)) }, field: "resources", limit: 254, actual: 255)
        let longPath = String(repeating: "p", count: 251) + ".png"  // 255 bytes
        XCTAssertEqual(
            prep { $0["resources"] = [["path": .string(longPath), "sha256": .string(String(repeating: "c", count: 64)), "bytes": 1]] }.status, 201)
        assertInvalid(
            prep { $0["resources"] = [["path": .string("x" + longPath), "sha256": .string(String(repeating: "c", count: 64)), "bytes": 1]] },
            field: "resources.0.path", limit: 255, actual: 256)
        assertInvalid(prep { $0["resources"] = [["path": "a.png", "sha256": "nothex", "bytes": 1]] }, field: "resources.0.sha256")

        // The start manifest: 8,192 bytes pass, 8,193 fail (field "schema").
        func padded(_ n: Int) -> JSONValue {
            Fixtures.prepareBody(binding: "pad", schema: ["properties": .object([String(repeating: "p", count: n): .object([:])])])
        }
        let base = try PrepareManifest.parse(padded(0)).startManifestBytes
        let at = padded(8192 - base), over = padded(8193 - base)
        XCTAssertEqual(try PrepareManifest.parse(at).startManifestBytes, 8192)
        XCTAssertEqual(Fixtures.prepare(env, inst, at).status, 201)
        assertInvalid(Fixtures.prepare(env, inst, over), field: "schema", limit: 8192, actual: 8193)

        // Names and unknown fields.
        assertInvalid(prep { $0["activity_type"] = .string(String(repeating: "a", count: 129)) }, field: "activity_type", limit: 128, actual: 129)
        XCTAssertEqual(prep { $0["activity_type"] = .string(String(repeating: "é", count: 128)) }.status, 201)
        assertInvalid(prep { $0["state"] = ["eta": "12:00"] }, field: "state")
        assertInvalid(prep { $0["bundle"] = ["bytes": 1, "modules": 1, "files": 1, "extra": 1] }, field: "bundle.extra")
        assertInvalid(prep { $0["renderer_digest"] = nil }, field: "renderer_digest")
        assertInvalid(
            Fixtures.prepare(env, inst, Fixtures.prepareBody(binding: String(repeating: "b", count: 256))),
            field: "binding_id", limit: 255, actual: 256)
    }

    func testPathTraversalIsRefused() throws {
        let t = try env.tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let good: JSONValue = ["path": "ok.png", "sha256": .string(String(repeating: "d", count: 64)), "bytes": 1]
        for path in [
            "../etc/passwd", "a/../../b", "..", "/etc/passwd", "a\\b.png", "..\\x", "./a.png", "a//b.png", "a/", "", "a/./b",
            "a/\u{0}b", "img/..", "C:\\x"
        ] {
            let bad: JSONValue = ["path": .string(path), "sha256": .string(String(repeating: "d", count: 64)), "bytes": 1]
            let r = Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["resources"] = [good, bad] })
            XCTAssertEqual(r.status, 400, "path \(path.debugDescription)")
            XCTAssertEqual(r.json["error"]?["details"]?["field"], "resources.1.path", "path \(path.debugDescription)")
        }
        // Duplicates are refused too; a dotted file name is fine.
        let dup = Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["resources"] = [good, good] })
        XCTAssertEqual(dup.json["error"]?["details"]?["field"], "resources.1.path")
        let dots: JSONValue = ["path": "a/..b/c..png", "sha256": .string(String(repeating: "d", count: 64)), "bytes": 1]
        XCTAssertEqual(Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["resources"] = [dots] }).status, 201)
        // Nothing was stored by the refused requests.
        let n = try env.db.tenant(t.id) { c in try c.query("SELECT count(*) AS n FROM template_versions WHERE tenant_id = $1", [t.id])[0].int("n") }
        XCTAssertEqual(n, 1)
    }

    func testSchemaErrorsAndSampleState() throws {
        let t = try env.tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let cases: [(String, String)] = [
            (#"{"properties":{"eta":{"pattern":"x"}}}"#, "/properties/eta/pattern"),
            (##"{"$ref":"#/x"}"##, "/$ref"),
            (#"{"anyOf":[{"type":"string"}]}"#, "/anyOf"),
            (#"{"type":["string","null"]}"#, "/type"),
            (#"{"properties":{"a":{"default":1}}}"#, "/properties/a/default"),
            (#"{"items":{"format":"date"}}"#, "/items/format")
        ]
        for (schema, pointer) in cases {
            let r = Fixtures.prepare(env, inst, Fixtures.prepareBody(schema: try JSONValue.parse(schema)))
            XCTAssertEqual(r.status, 400, schema)
            XCTAssertEqual(r.errorCode, "INVALID_STATE_SCHEMA", schema)
            XCTAssertEqual(r.json["error"]?["details"]?["pointer"]?.stringValue, pointer, schema)
        }
        // sample_state against the schema: 422 with the pointer of the first violation.
        let mismatch = Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["sample_state"] = ["eta": "12:30", "stops": [1, "2"]] })
        XCTAssertEqual(mismatch.status, 422)
        XCTAssertEqual(mismatch.errorCode, "STATE_SCHEMA_MISMATCH")
        XCTAssertEqual(mismatch.json["error"]?["details"]?["pointer"], "/stops/1")
        let missing = Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["sample_state"] = ["stops": []] })
        XCTAssertEqual(missing.status, 422)
        XCTAssertEqual(missing.json["error"]?["details"]?["pointer"], "")
        let tooLong = Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["sample_state"] = ["eta": .string(String(repeating: "😀", count: 21))] })
        XCTAssertEqual(tooLong.json["error"]?["details"]?["pointer"], "/eta")
        XCTAssertEqual(
            Fixtures.prepare(env, inst, Fixtures.prepareBody { $0["sample_state"] = ["eta": .string(String(repeating: "😀", count: 20))] }).status, 201
        )
        // Without a schema: any object of depth ≤ 12.
        XCTAssertEqual(
            Fixtures.prepare(env, inst, Fixtures.prepareBody(binding: "free", schema: nil) { $0["sample_state"] = ["x": [1, "y"]] }).status, 201)
        let notObject = Fixtures.prepare(env, inst, Fixtures.prepareBody(binding: "free", schema: nil) { $0["sample_state"] = [1] })
        XCTAssertEqual(notObject.json["error"]?["details"]?["field"], "sample_state")
    }

    func testAccessRetiredInstallationAndAndroid() throws {
        let t = try env.tenant()
        let other = try env.tenant(name: "Other")
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let inst2 = try Fixtures.installation(env, publishable: t.publishable)
        let foreign = try Fixtures.installation(env, publishable: other.publishable)

        // Another installation's path, another tenant's installation: 404; other credentials: 403.
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst2.id)/start-targets", Fixtures.prepareBody(), as: inst.credential).status, 404)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(foreign.id)/start-targets", Fixtures.prepareBody(), as: inst.credential).status, 404)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/start-targets", Fixtures.prepareBody(), as: t.publishable).status, 403)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/start-targets", Fixtures.prepareBody(), as: t.master).status, 403)
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/start-targets", Fixtures.prepareBody()).status, 401)

        // Disconnect retires the start targets; later prepares → 410.
        let (st, _) = try Fixtures.prepared(env, inst, Fixtures.prepareBody())
        XCTAssertEqual(env.call("POST", "/v1/installations/\(inst.id)/disconnect", [:], as: inst.credential).status, 200)
        let gone = Fixtures.prepare(env, inst, Fixtures.prepareBody())
        XCTAssertEqual(gone.status, 410)
        XCTAssertEqual(gone.errorCode, "INSTALLATION_RETIRED")
        let status = try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: st)?.status }
        XCTAssertEqual(status, "retired")

        // Android: pending until the installation has an FCM token, then ready (docs/providers.md).
        let android = try Fixtures.installation(env, publishable: t.publishable, platform: "android")
        let p = Fixtures.prepare(env, android, Fixtures.prepareBody())
        XCTAssertEqual(p.status, 201)
        XCTAssertEqual(p["status"], "pending")
        XCTAssertEqual(p["platform"], "android")
        let ast = try XCTUnwrap(p["start_target_id"]?.stringValue)
        let fcm = "fcm-token-\(UUID().uuidString)"
        XCTAssertEqual(env.call("PUT", "/v1/installations/\(android.id)/fcm-token", ["token": .string(fcm)], as: android.credential).status, 200)
        XCTAssertEqual(try env.db.tenant(t.id) { c in try StartTargetStore.get(c, tenantId: t.id, id: ast)?.status }, "ready")
        // A new start target of an installation that already has a token is ready at once.
        XCTAssertEqual(Fixtures.prepare(env, android, Fixtures.prepareBody(activityType: "pickup"))["status"], "ready")
        // Android has no push-to-start tokens.
        let ptt = env.call(
            "PUT", "/v1/installations/\(android.id)/start-targets/\(ast)/push-to-start-token", ["token": "abcd"], as: android.credential)
        XCTAssertEqual(ptt.status, 400)
        XCTAssertEqual(ptt.json["error"]?["details"]?["field"], "token")
        XCTAssertFalse(env.logText.contains(fcm))
    }
}
