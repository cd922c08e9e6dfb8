import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md "Installation attributes": `os_version` and `frequent_updates` at
/// registration and through `PATCH /v1/installations/{id}` with the installation's credential.
final class InstallationAttributesTests: TenancyTestCase {
    func register(_ t: TestEnvironment.Tenant, _ extra: [String: JSONValue]) -> TestEnvironment.Reply {
        var body: [String: JSONValue] = [
            "platform": "ios", "app_id": "com.example.app", "environment": "sandbox",
            "install_id": .string(UUID().uuidString)
        ]
        for (k, v) in extra { body[k] = v }
        return call("POST", "/v1/installations", .object(body), as: t.publishable)
    }

    func testRegistrationTakesBothFieldsAndDefaultsThem() throws {
        let t = try tenant()
        let plain = register(t, [:])
        XCTAssertEqual(plain.status, 201, plain.text)
        XCTAssertEqual(plain["os_version"], .null)
        XCTAssertEqual(plain["frequent_updates"], false)

        let full = register(t, ["os_version": "18.2", "frequent_updates": true])
        XCTAssertEqual(full.status, 201, full.text)
        XCTAssertEqual(full["os_version"], "18.2")
        XCTAssertEqual(full["frequent_updates"], true)
        let id = try XCTUnwrap(full["installation_id"]?.stringValue)
        let row = try env.db.system { c in try c.query("SELECT os_version, frequent_updates FROM installations WHERE id = $1", [id])[0] }
        XCTAssertEqual(try row.optionalString("os_version"), "18.2")
        XCTAssertEqual(try row.bool("frequent_updates"), true)

        // Leading zeros are dropped: the stored text is canonical.
        XCTAssertEqual(register(t, ["os_version": "017.05.01"])["os_version"], "17.5.1")
    }

    func testRegistrationRefusesBadValuesNamingTheField() throws {
        let t = try tenant()
        // Exactly at the bounds: 3 parts of 4 digits (14 characters) pass.
        XCTAssertEqual(register(t, ["os_version": "9999.9999.9999"]).status, 201)
        XCTAssertEqual(register(t, ["os_version": "18"]).status, 201)
        let bad: [(JSONValue, String)] = [
            ("18.2.1.1", "os_version"), ("10000", "os_version"), ("18.", "os_version"), ("", "os_version"),
            ("18.2a", "os_version"), ("iOS 18", "os_version"), ("99999.9999.9999", "os_version"), (.int(18), "os_version"),
            ("yes", "frequent_updates"), (.int(1), "frequent_updates")
        ]
        for (value, field) in bad {
            let r = register(t, [field: value])
            XCTAssertEqual(r.status, 400, "\(field)=\(value): \(r.text)")
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
            XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field, "\(value)")
        }
    }

    func testPatchChangesOnlyWhatItNames() throws {
        let t = try tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let path = "/v1/installations/\(inst.id)"

        let empty = call("PATCH", path, [:], as: inst.credential)
        XCTAssertEqual(empty.status, 200, empty.text)
        XCTAssertEqual(empty["os_version"], .null)
        XCTAssertEqual(empty["frequent_updates"], false)

        let os = call("PATCH", path, ["os_version": "18.2"], as: inst.credential)
        XCTAssertEqual(os.status, 200, os.text)
        XCTAssertEqual(os["os_version"], "18.2")
        XCTAssertEqual(os["frequent_updates"], false)
        XCTAssertEqual(os["object"], "installation")
        XCTAssertNil(os["credential"], "a patch never shows a credential")

        let fu = call("PATCH", path, ["frequent_updates": true, "idempotency_key": "k1"], as: inst.credential)
        XCTAssertEqual(fu.status, 200, fu.text)
        XCTAssertEqual(fu["os_version"], "18.2", "an absent field keeps its value")
        XCTAssertEqual(fu["frequent_updates"], true)

        let both = call("PATCH", path, ["os_version": "26.0.1", "frequent_updates": false], as: inst.credential)
        XCTAssertEqual(both["os_version"], "26.0.1")
        XCTAssertEqual(both["frequent_updates"], false)
    }

    func testPatchRefusesBadInputAndOtherInstallations() throws {
        let t = try tenant()
        let inst = try Fixtures.installation(env, publishable: t.publishable)
        let other = try Fixtures.installation(env, publishable: t.publishable)
        let path = "/v1/installations/\(inst.id)"
        let bad: [(String, JSONValue)] = [
            ("os_version", "1.2.3.4"), ("os_version", "12345"), ("os_version", .bool(true)), ("os_version", "18,2"),
            ("frequent_updates", "true"), ("frequent_updates", .int(0)), ("platform", "android")
        ]
        for (field, value) in bad {
            let r = call("PATCH", path, .object([field: value]), as: inst.credential)
            XCTAssertEqual(r.status, 400, "\(field)=\(value): \(r.text)")
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
            XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field)
        }
        XCTAssertEqual(call("PATCH", path, ["os_version": "1.2.3"], as: inst.credential).status, 200, "three parts pass")

        // Another installation's id, and an unknown id, look the same: 404.
        let foreign = call("PATCH", "/v1/installations/\(other.id)", ["os_version": "18.0"], as: inst.credential)
        let absent = call("PATCH", "/v1/installations/ins_00000000000000000000000000", ["os_version": "18.0"], as: inst.credential)
        XCTAssertEqual(foreign.status, 404)
        XCTAssertEqual(absent.status, 404)
        XCTAssertEqual(foreign.errorCode, absent.errorCode)
        XCTAssertEqual(foreign.json["error"]?["message"], absent.json["error"]?["message"])
        let untouched = try env.db.system { c in
            try c.query("SELECT os_version FROM installations WHERE id = $1", [other.id])[0].optionalString("os_version")
        }
        XCTAssertNil(untouched)

        // Another tenant's installation credential cannot reach it either; a master key is not a device.
        let t2 = try tenant(name: "Other")
        let stranger = try Fixtures.installation(env, publishable: t2.publishable)
        XCTAssertEqual(call("PATCH", path, ["os_version": "18.0"], as: stranger.credential).status, 404)
        XCTAssertEqual(call("PATCH", path, ["os_version": "18.0"], as: t.master).status, 403)
        XCTAssertEqual(call("PATCH", path, ["os_version": "18.0"]).status, 401)

        // Retired: 410.
        XCTAssertEqual(call("POST", "\(path)/disconnect", [:], as: inst.credential).status, 200)
        let gone = call("PATCH", path, ["os_version": "18.0"], as: inst.credential)
        XCTAssertEqual(gone.status, 410, gone.text)
        XCTAssertEqual(gone.errorCode, "INSTALLATION_RETIRED")
    }
}
