import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md `GET /v1/audit-events` (who, what, when, request id) and docs/http-conventions.md list parameters.
final class TenancyAuditTests: TenancyTestCase {
    struct Expected { let action: String; let objectId: String; let actor: String; let requestId: String }

    func testEveryAdminActionIsAuditedWithActorAndRequestId() throws {
        let op = try operatorKey()
        let opId = try XCTUnwrap(CredentialToken.parse(op)?.id)
        var expected: [Expected] = []
        func record(_ r: TestEnvironment.Reply, _ action: String, _ objectId: String?, _ actor: String, line: UInt = #line) {
            XCTAssertTrue((200...201).contains(r.status), "\(action): \(r.text)", line: line)
            guard let objectId, let rid = r.headers["x-request-id"] else { return XCTFail("\(action): no object id or request id", line: line) }
            expected.append(Expected(action: action, objectId: objectId, actor: actor, requestId: rid))
        }

        let created = call("POST", "/v1/operator/tenants", ["name": "Audited", "daily_push_quota": 50], as: op)
        let tenantId = try XCTUnwrap(created["tenant"]?["id"]?.stringValue)
        let master = try XCTUnwrap(created["master_key"]?["credential"]?.stringValue)
        let masterId = try XCTUnwrap(created["master_key"]?["id"]?.stringValue)
        record(created, "tenant.create", tenantId, opId)
        record(created, "master_key.create", masterId, opId)
        record(created, "publishable_key.create", created["publishable_key"]?["id"]?.stringValue, opId)
        let publishable = try XCTUnwrap(created["publishable_key"]?["credential"]?.stringValue)

        let st = try Fixtures.startTarget(env, tenant: tenantId)
        let mk = call("POST", "/v1/master-keys", ["label": "second", "idempotency_key": "mk-1"], as: master)
        record(mk, "master_key.create", mk["id"]?.stringValue, masterId)
        let mkReplay = call("POST", "/v1/master-keys", ["label": "second", "idempotency_key": "mk-1"], as: master)
        XCTAssertEqual(mkReplay.headers["idempotent-replayed"], "true")  // a replay does nothing, so records nothing
        let sk = call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(st)], "permissions": ["activities:start"],
                "idempotency_key": "sk-1"
            ], as: master)
        record(sk, "sender_key.create", sk["id"]?.stringValue, masterId)
        let skId = sk["id"]?.stringValue ?? ""
        record(call("POST", "/v1/remote-updates/sender-keys/\(skId)/revoke", [:], as: master), "sender_key.revoke", skId, masterId)
        let pk = call("POST", "/v1/publishable-keys", ["app_id": "com.example.app", "platform": "android"], as: master)
        record(pk, "publishable_key.create", pk["id"]?.stringValue, masterId)
        let pkId = pk["id"]?.stringValue ?? ""
        record(call("POST", "/v1/publishable-keys/\(pkId)/revoke", [:], as: master), "publishable_key.revoke", pkId, masterId)
        let mkId = mk["id"]?.stringValue ?? ""
        record(call("POST", "/v1/master-keys/\(mkId)/revoke", ["expires_in_seconds": 60], as: master), "master_key.revoke", mkId, masterId)
        let inst = try Fixtures.installation(env, publishable: publishable)
        remember(inst.credential)
        record(call("POST", "/v1/installations/\(inst.id)/disconnect", [:], as: master), "installation.disconnect", inst.id, masterId)
        record(call("PATCH", "/v1/operator/tenants/\(tenantId)", ["daily_push_quota": 75], as: op), "tenant.update", tenantId, opId)

        let all = call("GET", "/v1/audit-events?limit=200", as: master)
        XCTAssertEqual(all.status, 200, all.text)
        XCTAssertEqual(all["next_cursor"], .null)
        let events = all["data"]?.arrayValue ?? []
        for e in expected {
            let match = events.filter { $0["action"]?.stringValue == e.action && $0["object_id"]?.stringValue == e.objectId }
            XCTAssertEqual(match.count, 1, "\(e.action) \(e.objectId) recorded once")
            XCTAssertEqual(match.first?["actor_id"]?.stringValue, e.actor, e.action)
            XCTAssertEqual(match.first?["request_id"]?.stringValue, e.requestId, "\(e.action): request id of the response")
            XCTAssertNotNil(match.first?["created_at"]?.stringValue.flatMap(Timestamp.parse), e.action)
        }
        XCTAssertEqual(events.count, expected.count, "no other events: \(events.map { $0["action"]?.stringValue ?? "" })")
        XCTAssertFalse(all.text.contains("lrm_") || all.text.contains("lrs_") || all.text.contains("lrp_"), "no credential in audit events")

        // Newest first, and limit=1 walks every event exactly once.
        let ids = events.compactMap { $0["id"]?.stringValue }
        XCTAssertEqual(ids, ids.sorted(by: >))
        var walked: [String] = [], cursor: String?, pages = 0
        repeat {
            let page = call("GET", "/v1/audit-events?limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""), as: master)
            XCTAssertEqual(page.status, 200, page.text)
            let data = page["data"]?.arrayValue ?? []
            XCTAssertLessThanOrEqual(data.count, 1)
            walked += data.compactMap { $0["id"]?.stringValue }
            cursor = page["next_cursor"]?.stringValue
            pages += 1
        } while cursor != nil && pages <= ids.count + 1
        XCTAssertEqual(walked, ids)
        XCTAssertEqual(Set(walked).count, walked.count)

        // Another tenant sees none of these events.
        let other = try tenant(name: "Other")
        let theirs = call("GET", "/v1/audit-events?limit=200", as: other.master)["data"]?.arrayValue ?? []
        XCTAssertTrue(theirs.allSatisfy { $0["object_id"]?.stringValue != tenantId && $0["actor_id"]?.stringValue != masterId })
    }

    func testListParameters() throws {
        let op = try operatorKey()
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        for _ in 0..<3 { _ = try senderKey(t, targets: [st]) }
        let lists: [(String, String)] = [
            ("/v1/master-keys", t.master), ("/v1/remote-updates/sender-keys", t.master),
            ("/v1/publishable-keys", t.master), ("/v1/audit-events", t.master),
            ("/v1/operator/tenants", op)
        ]
        let forged = [
            "not-a-cursor!!",
            Data("v2:sk_00000000000000000000000000".utf8).base64EncodedString(),
            "%00",
            Data("v1:".utf8).base64EncodedString()
        ]
        for (path, cred) in lists {
            for bad in ["0", "201", "-1", "abc", "1.5"] {
                let r = call("GET", "\(path)?limit=\(bad)", as: cred)
                XCTAssertEqual(r.status, 400, "\(path) limit=\(bad): \(r.text)")
                XCTAssertEqual(r.errorCode, "INVALID_REQUEST")
                XCTAssertEqual(r.field, "limit", "\(path) limit=\(bad)")
            }
            for good in ["1", "200"] {
                let r = call("GET", "\(path)?limit=\(good)", as: cred)
                XCTAssertEqual(r.status, 200, "\(path) limit=\(good): \(r.text)")
                XCTAssertLessThanOrEqual(r["data"]?.arrayValue?.count ?? 99, Int(good)!)
            }
            for c in forged {
                let r = call("GET", "\(path)?cursor=\(c.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? c)", as: cred)
                XCTAssertEqual(r.status, 400, "\(path) cursor=\(c): \(r.text)")
                XCTAssertEqual(r.field, "cursor", "\(path) cursor=\(c)")
            }
        }
        // Keyset pages of sender keys: 2 + 1, no overlap.
        let p1 = call("GET", "/v1/remote-updates/sender-keys?limit=2", as: t.master)
        let next = try XCTUnwrap(p1["next_cursor"]?.stringValue)
        let p2 = call("GET", "/v1/remote-updates/sender-keys?limit=2&cursor=\(next)", as: t.master)
        XCTAssertEqual(p1["data"]?.arrayValue?.count, 2)
        XCTAssertEqual(p2["data"]?.arrayValue?.count, 1)
        XCTAssertEqual(p2["next_cursor"], .null)
        let ids = ((p1["data"]?.arrayValue ?? []) + (p2["data"]?.arrayValue ?? [])).compactMap { $0["id"]?.stringValue }
        XCTAssertEqual(Set(ids).count, 3)
    }
}
