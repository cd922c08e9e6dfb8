import Foundation
import Crypto
import Delivery
import JSON
import LiveRelayCore
import LiveRelaySandbox
import LiveRelayStore
import Logging
import Metrics
import Postgres
import XCTest
import LiveRelayTestSupport

/// Credentials stored sealed in PostgreSQL (migration 0004), loaded and decrypted by
/// `DatabaseProviderCredentialSource`, used against the sandbox, health written back.
final class ProviderCredentialSourceTests: XCTestCase {
    var database: TestDatabase?
    var pool: PostgresPool!
    var db: Database!

    override func setUpWithError() throws {
        let database = try TestDatabase()
        self.database = database
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 4, acquireTimeoutSeconds: 5)
        db = Database(pool: pool)
        _ = try db.system { c in try c.execute("INSERT INTO tenants (tenant_id, name, daily_push_quota) VALUES ('ten_db', 'T', 100)") }
    }

    override func tearDown() {
        pool?.close()
        database?.drop()
    }

    func testStoredCredentialsDecryptSendAndRecordHealth() throws {
        let h = try ProviderHarness()
        defer { h.tearDown() }
        let kek = try AESGCM(key: SecureRandom.bytes(32))
        let apnsFP = h.sandbox.apnsKey.publicKey.fingerprint, fcmFP = h.sandbox.serviceAccountKey.publicKey.fingerprint
        try db.tenant("ten_db") { c in
            _ = try ProviderCredentialStore.upsertAPNs(
                c, tenantId: "ten_db", environment: "sandbox", teamId: h.sandbox.teamId, keyId: h.sandbox.keyId, topics: ["com.example.app"],
                privateKeySealed: try ProviderCredentialStore.sealPrivateKey(
                    h.sandbox.apnsKey.pkcs8PEM, kek: kek, tenantId: "ten_db",
                    provider: "apns", environment: "sandbox"),
                fingerprint: apnsFP, actorId: "mk_test")
            _ = try ProviderCredentialStore.upsertFCM(
                c, tenantId: "ten_db", projectId: h.sandbox.projectId, clientEmail: h.sandbox.clientEmail, privateKeyId: h.sandbox.privateKeyId,
                tokenURI: h.sandbox.tokenURI,
                privateKeySealed: try ProviderCredentialStore.sealPrivateKey(
                    h.sandbox.serviceAccountKey.pkcs8PEM, kek: kek, tenantId: "ten_db",
                    provider: "fcm", environment: nil),
                fingerprint: fcmFP, actorId: "mk_test")
        }
        // The stored box is not the key.
        let stored = try db.tenant("ten_db") { c in
            try c.query("SELECT private_key_sealed FROM apns_credentials WHERE tenant_id = 'ten_db'")[0].bytes("private_key_sealed")
        }
        XCTAssertNil(String(decoding: stored, as: UTF8.self).range(of: "PRIVATE KEY"))

        let source = DatabaseProviderCredentialSource(db: db, kek: kek, log: Logger(minimum: .error), now: { h.clock.now() })
        let sender = ProviderSender(
            source: source, endpoints: h.endpoints, metrics: MetricsRegistry(), log: Logger(minimum: .error),
            now: { h.clock.now() })
        defer { sender.close() }
        assertAccepted(sender.send(h.iosPush(tenant: "ten_db")))
        assertAccepted(sender.send(h.androidPush(tenant: "ten_db")))
        source.flush()
        let (apns, fcm) = try db.tenant("ten_db") { c in
            (try ProviderCredentialStore.apnsCredentials(c, tenantId: "ten_db")[0], try ProviderCredentialStore.fcmCredential(c, tenantId: "ten_db")!)
        }
        XCTAssertNotNil(apns.lastSuccessAt)
        XCTAssertNil(apns.lastFailureAt)
        XCTAssertNotNil(fcm.lastSuccessAt)

        // A credential failure is recorded with its reason; an old key's report changes nothing.
        h.sandbox.addFault(SandboxFault(provider: "apns", status: 403, reason: "InvalidProviderToken", times: 1))
        _ = sender.send(h.iosPush(tenant: "ten_db"))
        source.report(
            ProviderCredentialHealthReport(
                provider: "fcm", tenantId: "ten_db", environment: nil, fingerprint: "sha256:old",
                at: h.clock.now(), failureReason: "401 x"))
        source.flush()
        let (apns2, fcm2) = try db.tenant("ten_db") { c in
            (try ProviderCredentialStore.apnsCredentials(c, tenantId: "ten_db")[0], try ProviderCredentialStore.fcmCredential(c, tenantId: "ten_db")!)
        }
        XCTAssertEqual(apns2.lastFailureReason, "403 InvalidProviderToken")
        XCTAssertNil(fcm2.lastFailureAt)

        // Cached for the TTL: a deleted row is still used until the cache expires or is invalidated.
        _ = try db.tenant("ten_db") { c in try c.execute("DELETE FROM fcm_credentials WHERE tenant_id = 'ten_db'") }
        assertAccepted(sender.send(h.androidPush(tenant: "ten_db")))
        h.clock.advance(61)
        if case .noCredentials = sender.send(h.androidPush(tenant: "ten_db")) {} else { XCTFail("cache outlived its TTL") }

        // Another KEK cannot open the boxes: no credentials, nothing sent.
        let wrong = DatabaseProviderCredentialSource(
            db: db, kek: try AESGCM(key: SecureRandom.bytes(32)), log: Logger(minimum: .error, sink: { _ in }))
        let other = ProviderSender(source: wrong, endpoints: h.endpoints, metrics: MetricsRegistry(), log: Logger(minimum: .error))
        defer { other.close() }
        if case .noCredentials(let why) = other.send(h.iosPush(tenant: "ten_db")) {
            XCTAssertTrue(why.contains("LIVERELAY_KEK"), why)
        } else {
            XCTFail("wrong KEK")
        }
    }
}
