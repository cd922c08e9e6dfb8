import Foundation
import XCTest
import LiveRelayTestSupport
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres

/// docs/credentials.md: a verified credential may be cached, but a revocation (or a suspension) reaches
/// every node's cache within 1 s through LISTEN/NOTIFY.
final class TenancyCacheTests: TenancyTestCase {
    /// A second API node: its own pool and `Authenticator` with its own invalidation listener
    /// on the same database, logging into the same capture.
    struct Node {
        let pool: PostgresPool
        let auth: Authenticator
        func stop() { auth.stop(); pool.close() }
    }

    func secondNode() -> Node {
        let pool = PostgresPool(conninfo: env.conninfo, maxConnections: 4, acquireTimeoutSeconds: 5)
        let logs = env.logs
        let auth = Authenticator(db: Database(pool: pool), log: Logger(minimum: .debug, sink: { logs.append($0) }))
        auth.startInvalidationListener(conninfo: env.conninfo)
        eventually("the second node's listener connects (it clears the cache when it does)", within: 10) { auth.isListening }
        return Node(pool: pool, auth: auth)
    }

    /// The error `authenticate` throws, nil when it succeeds.
    func failure(_ auth: Authenticator, _ req: HTTPRequest) -> HTTPError? {
        do { _ = try auth.authenticate(req); return nil } catch let e as HTTPError { return e } catch {
            XCTFail("unexpected error \(error)")
            return HTTPError(status: 0, code: "?", message: "\(error)")
        }
    }

    /// Polls every 5 ms until `node` rejects `req` with `status`; returns the seconds it took.
    func secondsUntilRejected(_ node: Node, _ req: HTTPRequest, status: Int, since start: Date, limit: Double = 3) -> Double {
        while Date().timeIntervalSince(start) < limit {
            if let e = failure(node.auth, req) {
                XCTAssertEqual(e.status, status)
                return Date().timeIntervalSince(start)
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return limit
    }

    func testSenderKeyRevocationReachesAnotherNodesCacheWithinOneSecond() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let sk = try senderKey(t, targets: [st])
        let node = secondNode()
        defer { node.stop() }
        let req = request(sk.credential)
        XCTAssertNil(failure(node.auth, req))
        XCTAssertEqual(node.auth.cachedCount, 1, "the verification is cached on the second node")
        XCTAssertNil(failure(node.auth, req))

        let start = Date()
        XCTAssertEqual(call("POST", "/v1/remote-updates/sender-keys/\(sk.id)/revoke", [:], as: t.master).status, 200)
        let elapsed = secondsUntilRejected(node, req, status: 401, since: start)
        XCTAssertLessThan(elapsed, 1, "revocation reached the other node after \(elapsed) s")
        XCTAssertEqual(failure(node.auth, req)?.code, "UNAUTHENTICATED")
    }

    func testTenantSuspensionReachesAnotherNodesCacheWithinOneSecond() throws {
        let op = try operatorKey()
        let t = try tenant()
        let node = secondNode()
        defer { node.stop() }
        let master = request(t.master), publishable = request(t.publishable)
        XCTAssertNil(failure(node.auth, master))
        XCTAssertNil(failure(node.auth, publishable))
        XCTAssertEqual(node.auth.cachedCount, 2)

        let start = Date()
        XCTAssertEqual(call("PATCH", "/v1/operator/tenants/\(t.id)", ["status": "suspended"], as: op).status, 200)
        let elapsed = secondsUntilRejected(node, master, status: 403, since: start)
        XCTAssertLessThan(elapsed, 1, "suspension reached the other node after \(elapsed) s")
        XCTAssertEqual(failure(node.auth, master)?.code, "TENANT_SUSPENDED")
        XCTAssertEqual(failure(node.auth, publishable)?.code, "TENANT_SUSPENDED")

        let back = Date()
        XCTAssertEqual(call("PATCH", "/v1/operator/tenants/\(t.id)", ["status": "active"], as: op).status, 200)
        var reinstated = false
        while Date().timeIntervalSince(back) < 1 && !reinstated {
            reinstated = failure(node.auth, master) == nil
            Thread.sleep(forTimeInterval: 0.005)
        }
        XCTAssertTrue(reinstated, "reactivation reached the other node within 1 s")
    }

    /// A revocation that commits while another node is verifying the same credential (after
    /// its database read, during argon2) must not leave that stale verification cached: the
    /// NOTIFY arrives before the entry is stored, so only a generation check can catch it.
    /// Each trial starts a cold verification, revokes after a varying delay, and requires the
    /// node to reject the key within 1 s.
    func testRevocationDuringAColdVerificationIsNotCachedStale() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let node = secondNode()
        defer { node.stop() }
        var stale: [Int] = []
        for trial in 0..<14 {
            let sk = try senderKey(t, targets: [st])
            let req = request(sk.credential)
            let done = DispatchSemaphore(value: 0)
            let auth = node.auth
            DispatchQueue.global().async {
                _ = try? auth.authenticate(req); done.signal()
            }
            Thread.sleep(forTimeInterval: Double(trial) * 0.003)
            try env.db.tenant(t.id) { c in
                _ = try KeyStore.revokeSenderKey(c, tenantId: t.id, id: sk.id)
                try CredentialLookup.announceInvalidation(c, subject: sk.id)
            }
            let revoked = Date()
            done.wait()
            if secondsUntilRejected(node, req, status: 401, since: revoked, limit: 1) >= 1 { stale.append(trial) }
        }
        XCTAssertEqual(stale, [], "revoked keys still accepted by the other node > 1 s after revocation in trials \(stale)")
    }
}
