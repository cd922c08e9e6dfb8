import Foundation
import XCTest
import Crypto
import JSON
import LiveRelayStore
import Postgres

/// docs/endpoints.md provider credentials: validation, sealing, fingerprints only, audit.
final class ProviderCredentialTests: APITestCase {

    static let p384 = """
        -----BEGIN PRIVATE KEY-----
        MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDAz3aa/xlJUNbI26ENT
        MsQyAAQ3vxQ3bX8K/86ls1n3XuIWSsvxF0W9xWjI6p0R+xShZANiAATLiULSw+T7
        zxyqKEIu/WnpuoAs9Ers1OumwINi+T1MGPqHazCU0Yy0E5oJsFO6P+E/+w2cY7Bg
        zUlrGM5ngNpCgSMUvVwBuVygTPWA5PhfZhPl0UuWdQr1mA49VBocCTQ=
        -----END PRIVATE KEY-----
        """

    func apnsBody(_ pem: String, env environment: String = "production", topics: [String] = ["com.example.app"]) -> JSONValue {
        [
            "team_id": "ABCDE12345", "key_id": "KEY1234567", "private_key": .string(pem),
            "topics": .array(topics.map(JSONValue.string)), "environment": .string(environment)
        ]
    }

    func testAPNsKeyIsSealedAndOnlyItsFingerprintIsShown() throws {
        let t = try env.tenant()
        let key = P256PrivateKey.generate()
        let pem = key.pkcs8PEM
        let secretLine = pem.split(separator: "\n")[1]
        let r = env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem), as: t.master)
        XCTAssertEqual(r.status, 201, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["fingerprint"]?.stringValue, key.publicKey.fingerprint)
        XCTAssertEqual(r["team_id"]?.stringValue, "ABCDE12345")
        XCTAssertEqual(r["environment"]?.stringValue, "production")
        XCTAssertEqual(r["topics"], ["com.example.app"])
        XCTAssertNil(String(decoding: r.raw, as: UTF8.self).range(of: String(secretLine)))
        XCTAssertNil(r["private_key"])
        // Replacing answers 200; GET shows fingerprints and health, never the key.
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem, topics: ["com.example.app", "com.example.b"]), as: t.master).status, 200)
        let list = env.call("GET", "/v1/provider-credentials", as: t.master)
        XCTAssertEqual(list.status, 200)
        let item = try XCTUnwrap(list["data"]?.arrayValue?.first)
        XCTAssertEqual(item["provider"]?.stringValue, "apns")
        XCTAssertEqual(item["fingerprint"]?.stringValue, key.publicKey.fingerprint)
        XCTAssertEqual(item["topics"]?.arrayValue?.count, 2)
        XCTAssertEqual(item["last_success_at"], .null)
        XCTAssertEqual(item["last_failure_at"], .null)
        XCTAssertNil(String(decoding: list.raw, as: UTF8.self).range(of: String(secretLine)))
        // Stored bytes are an AES-GCM box, not the PEM.
        let stored = try env.db.tenant(t.id) { c in
            try c.query("SELECT private_key_sealed FROM apns_credentials WHERE tenant_id = $1", [t.id])[0].bytes("private_key_sealed")
        }
        XCTAssertEqual(stored.first, AESGCM.version)
        XCTAssertNil(String(decoding: stored, as: UTF8.self).range(of: "PRIVATE KEY"))
        XCTAssertNil(String(decoding: stored, as: UTF8.self).range(of: String(secretLine)))
        // Audited with the fingerprint; the key is in no audit event and no log line.
        let audit = env.call("GET", "/v1/audit-events", as: t.master)
        let events = audit["data"]?.arrayValue ?? []
        let puts = events.filter { $0["action"]?.stringValue == "provider_credential.apns.put" }
        XCTAssertEqual(puts.count, 2)
        XCTAssertEqual(puts.first?["details"]?["fingerprint"]?.stringValue, key.publicKey.fingerprint)
        XCTAssertEqual(puts.first?["actor_id"]?.stringValue, t.masterId)
        XCTAssertNil(String(decoding: audit.raw, as: UTF8.self).range(of: String(secretLine)))
        XCTAssertNil(env.logText.range(of: String(secretLine)))
    }

    func testAPNsKeyMustBeP256() throws {
        let t = try env.tenant()
        let rsa = RSAPrivateKey.generate().pkcs8PEM
        for (name, pem) in [
            ("rsa", rsa), ("p384", Self.p384), ("garbage", "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----"),
            ("text", "hello")
        ] {
            let r = env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem), as: t.master)
            XCTAssertEqual(r.status, 400, name)
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST", name)
            XCTAssertEqual(r["error"]?["details"]?["field"]?.stringValue, "private_key", name)
            XCTAssertNil(String(decoding: r.raw, as: UTF8.self).range(of: "BEGIN"), "the key is not echoed: \(name)")
        }
        let good = P256PrivateKey.generate().pkcs8PEM
        var body = apnsBody(good).objectValue!
        body["team_id"] = "short"
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)["error"]?["details"]?["field"]?.stringValue, "team_id")
        body = apnsBody(good, topics: []).objectValue!
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)["error"]?["details"]?["field"]?.stringValue, "topics")
        body = apnsBody(good, topics: ["com.example.app.push-type.liveactivity"]).objectValue!
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)["error"]?["details"]?["field"]?.stringValue, "topics.0")
        body = apnsBody(good, env: "staging").objectValue!
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)["error"]?["details"]?["field"]?.stringValue, "environment")
        body = apnsBody(good).objectValue!
        body["extra"] = 1
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master).status, 400)
        XCTAssertEqual(env.call("GET", "/v1/provider-credentials", as: t.master)["data"], [])
    }

    func serviceAccount(_ pem: String) -> JSONValue {
        [
            "type": "service_account", "project_id": "demo-project", "private_key_id": "0123abcd", "private_key": .string(pem),
            "client_email": "push@demo-project.iam.gserviceaccount.com", "client_id": "1234",
            "token_uri": "https://oauth2.googleapis.com/token", "auth_uri": "https://accounts.google.com/o/oauth2/auth"
        ]
    }

    func testFCMServiceAccountIsSealedAndValidated() throws {
        let t = try env.tenant()
        let key = RSAPrivateKey.generate()
        let secretLine = String(key.pkcs8PEM.split(separator: "\n")[2])
        let r = env.call("PUT", "/v1/provider-credentials/fcm", ["service_account": serviceAccount(key.pkcs8PEM)], as: t.master)
        XCTAssertEqual(r.status, 201, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["fingerprint"]?.stringValue, key.publicKey.fingerprint)
        XCTAssertEqual(r["project_id"]?.stringValue, "demo-project")
        XCTAssertNil(String(decoding: r.raw, as: UTF8.self).range(of: secretLine))
        // The key file's text is accepted as well.
        let text = String(decoding: serviceAccount(key.pkcs8PEM).serialized(), as: UTF8.self)
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/fcm", ["service_account": .string(text)], as: t.master).status, 200)
        let list = env.call("GET", "/v1/provider-credentials", as: t.master)
        XCTAssertEqual(list["data"]?.arrayValue?.map { $0["provider"]?.stringValue }, ["fcm"])
        XCTAssertNil(String(decoding: list.raw, as: UTF8.self).range(of: secretLine))
        let stored = try env.db.tenant(t.id) { c in
            try c.query("SELECT private_key_sealed FROM fcm_credentials WHERE tenant_id = $1", [t.id])[0].bytes("private_key_sealed")
        }
        XCTAssertNil(String(decoding: stored, as: UTF8.self).range(of: "PRIVATE KEY"))
        let audit = env.call("GET", "/v1/audit-events", as: t.master)["data"]?.arrayValue ?? []
        XCTAssertEqual(audit.filter { $0["action"]?.stringValue == "provider_credential.fcm.put" }.count, 2)
        XCTAssertNil(env.logText.range(of: secretLine))

        // The `details.field` of the refusal of a PUT of service account `sa`.
        func refusedField(_ sa: [String: JSONValue]) -> String? {
            env.call("PUT", "/v1/provider-credentials/fcm", ["service_account": .object(sa)], as: t.master)["error"]?["details"]?["field"]?
                .stringValue
        }
        var sa = serviceAccount(P256PrivateKey.generate().pkcs8PEM).objectValue!
        XCTAssertEqual(refusedField(sa), "service_account.private_key")
        sa = serviceAccount(key.pkcs8PEM).objectValue!
        sa["type"] = "authorized_user"
        XCTAssertEqual(refusedField(sa), "service_account.type")
        sa = serviceAccount(key.pkcs8PEM).objectValue!
        sa["token_uri"] = "http://169.254.169.254/token"
        XCTAssertEqual(refusedField(sa), "service_account.token_uri")
        XCTAssertEqual(
            env.call("PUT", "/v1/provider-credentials/fcm", [:], as: t.master)["error"]?["details"]?["field"]?.stringValue, "service_account")
    }

    func testOnlyTheTenantsMasterKeyManagesCredentials() throws {
        let t = try env.tenant(), other = try env.tenant(name: "Other")
        let pem = P256PrivateKey.generate().pkcs8PEM
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem), as: t.publishable).status, 403)
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem)).status, 401)
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/apns", apnsBody(pem), as: t.master).status, 201)
        XCTAssertEqual(env.call("GET", "/v1/provider-credentials", as: other.master)["data"], [], "tenants never see each other's credentials")
        let sender = try Fixtures.senderKey(env, master: t.master, targets: [try Fixtures.startTarget(env, tenant: t.id)])
        XCTAssertEqual(env.call("GET", "/v1/provider-credentials", as: sender.credential).status, 403)
    }

    func testIdempotencyKeyReplaysTheFirstAnswer() throws {
        let t = try env.tenant()
        var body = apnsBody(P256PrivateKey.generate().pkcs8PEM).objectValue!
        body["idempotency_key"] = "put-apns-1"
        let first = env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)
        XCTAssertEqual(first.status, 201)
        let again = env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master)
        XCTAssertEqual(again.status, 201, "the original status again")
        XCTAssertEqual(again.headers["idempotent-replayed"], "true")
        XCTAssertEqual(again["fingerprint"], first["fingerprint"])
        body["private_key"] = .string(P256PrivateKey.generate().pkcs8PEM)
        XCTAssertEqual(env.call("PUT", "/v1/provider-credentials/apns", .object(body), as: t.master).errorCode, "IDEMPOTENCY_KEY_REUSED")
        let audit = env.call("GET", "/v1/audit-events", as: t.master)["data"]?.arrayValue ?? []
        XCTAssertEqual(audit.filter { $0["action"]?.stringValue == "provider_credential.apns.put" }.count, 1, "nothing done twice")
    }
}
