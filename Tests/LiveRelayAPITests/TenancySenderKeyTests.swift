import Foundation
import XCTest
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import Locking

/// docs/http-conventions.md idempotency on sender-key creation (the same credential is replayed, stored
/// sealed) and docs/credentials.md/docs/endpoints.md validation of a sender key's fields.
final class TenancySenderKeyTests: TenancyTestCase {
    func senderKeyCount(_ tenant: String) throws -> Int {
        try env.db.system { c in try c.query("SELECT count(*)::int AS n FROM sender_keys WHERE tenant_id = $1", [tenant])[0].int("n") }
    }

    func testReplayReturnsTheIdenticalCredentialAndReuseWithAnotherBodyIs422() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let body: JSONValue = [
            "targets": [.string(st)], "created_from": [], "permissions": ["activities:start", "activities:update"],
            "label": "ci", "idempotency_key": "replay-1"
        ]
        let first = call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
        XCTAssertEqual(first.status, 201, first.text)
        XCTAssertNil(first.headers["idempotent-replayed"])
        let credential = try XCTUnwrap(first["credential"]?.stringValue)

        let replay = call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
        XCTAssertEqual(replay.status, 201, "a replayed creation answers 201 again: \(replay.text)")
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay.raw, first.raw, "the replayed body is byte-identical")
        XCTAssertEqual(replay["credential"]?.stringValue, credential)
        XCTAssertEqual(call("GET", "/v1/remote-updates/capabilities", as: credential).status, 200, "the replayed credential authenticates")

        // Canonical JSON: the same request with other key order and whitespace is the same request.
        let reordered = Array(
            """
            { "idempotency_key": "replay-1", "label": "ci",
              "permissions": ["activities:start", "activities:update"], "created_from": [], "targets": ["\(st)"] }
            """.utf8)
        let replay2 = call("POST", "/v1/remote-updates/sender-keys", as: t.master, rawBody: reordered)
        XCTAssertEqual(replay2.status, 201, replay2.text)
        XCTAssertEqual(replay2.raw, first.raw)

        var other = body.objectValue!
        other["label"] = "another label"
        let reused = call("POST", "/v1/remote-updates/sender-keys", .object(other), as: t.master)
        XCTAssertEqual(reused.status, 422, reused.text)
        XCTAssertEqual(reused.errorCode, "IDEMPOTENCY_KEY_REUSED")

        // The same path percent-encoded reaches the same handler, so it is the same key's scope:
        // a replay, and a 422 with another body (not a second key minted).
        let encoded = call("POST", "/v1/remote-updates/%73ender-keys", body, as: t.master)
        XCTAssertEqual(encoded.status, 201, encoded.text)
        XCTAssertEqual(encoded.headers["idempotent-replayed"], "true", "the encoded spelling replays: \(encoded.text)")
        XCTAssertEqual(encoded["credential"]?.stringValue, credential)
        let encodedReuse = call("POST", "/v1/remote-updates/sender%2Dkeys", .object(other), as: t.master)
        XCTAssertEqual(encodedReuse.status, 422, encodedReuse.text)
        XCTAssertEqual(encodedReuse.errorCode, "IDEMPOTENCY_KEY_REUSED")
        XCTAssertEqual(try senderKeyCount(t.id), 1, "nothing was done twice")
    }

    func testConcurrentIdenticalRequestsCommitOnce() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let body: JSONValue = ["targets": [.string(st)], "created_from": [], "permissions": ["activities:start"], "idempotency_key": "conc-1"]
        let replies = Locked<[TestEnvironment.Reply]>([])
        let env = self.env!
        DispatchQueue.concurrentPerform(iterations: 10) { _ in
            let r = env.call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
            replies.withLock { $0.append(r) }
        }
        let all = replies.withLock { $0 }
        for r in all { collect(r) }
        XCTAssertEqual(all.count, 10)
        XCTAssertEqual(
            all.map(\.status), Array(repeating: 201, count: 10), "replays answer the original 201: " + all.map(\.text).joined(separator: "\n"))
        XCTAssertEqual(all.filter { $0.headers["idempotent-replayed"] == "true" }.count, 9)
        let creds = Set(all.compactMap { $0["credential"]?.stringValue })
        XCTAssertEqual(creds.count, 1, "every response carries the same credential")
        XCTAssertEqual(Set(all.map(\.raw)).count, 1, "every response has the same body")
        XCTAssertEqual(try senderKeyCount(t.id), 1, "exactly one sender key row")
        XCTAssertEqual(call("GET", "/v1/remote-updates/capabilities", as: creds.first!).status, 200)
    }

    func testStoredReplayResponseIsSealed() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let r = call(
            "POST", "/v1/remote-updates/sender-keys",
            ["targets": [.string(st)], "permissions": ["activities:start"], "idempotency_key": "sealed-1"], as: t.master)
        XCTAssertEqual(r.status, 201, r.text)
        let credential = try XCTUnwrap(r["credential"]?.stringValue)
        let secret = try XCTUnwrap(CredentialToken.parse(credential)?.secret)
        let row = try env.db.system { c in
            try c.query(
                "SELECT response_body, response_sealed, status_code, expires_at - created_at AS kept FROM idempotency_records WHERE tenant_id = $1 AND key = $2",
                [t.id, "sealed-1"])
        }
        XCTAssertEqual(row.count, 1)
        XCTAssertNil(try row[0].optionalBytes("response_body"), "no plaintext response is stored")
        let sealed = try XCTUnwrap(row[0].optionalBytes("response_sealed"))
        XCTAssertGreaterThan(sealed.count, credential.utf8.count)
        let sealedText = String(decoding: sealed, as: UTF8.self)
        XCTAssertFalse(sealedText.contains(credential))
        XCTAssertFalse(sealedText.contains(secret))
        XCTAssertFalse(sealed.contains(subsequence: Array(secret.utf8.prefix(16))))
        XCTAssertEqual(try row[0].int("status_code"), 201)
        XCTAssertEqual(try row[0].string("kept"), "1 day", "purged after 24 h")
        // And the replay still opens it.
        let replay = call(
            "POST", "/v1/remote-updates/sender-keys",
            ["targets": [.string(st)], "permissions": ["activities:start"], "idempotency_key": "sealed-1"], as: t.master)
        XCTAssertEqual(replay["credential"]?.stringValue, credential)
    }

    /// docs/http-conventions.md: the sealed replayable credential is purged after 24 h — an expired record,
    /// even one no purge has removed yet, is never replayed; the key starts afresh.
    func testExpiredIdempotencyRecordIsNeverReplayed() throws {
        let t = try tenant()
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let body: JSONValue = ["targets": [.string(st)], "permissions": ["activities:start"], "idempotency_key": "day-old"]
        let first = call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
        XCTAssertEqual(first.status, 201, first.text)
        _ = try env.db.system { c in
            try c.execute(
                "UPDATE idempotency_records SET created_at = now() - interval '25 hours', expires_at = now() - interval '1 hour' WHERE key = 'day-old'"
            )
        }
        let later = call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
        XCTAssertEqual(later.status, 201, later.text)
        XCTAssertNil(later.headers["idempotent-replayed"])
        XCTAssertNotEqual(later["credential"]?.stringValue, first["credential"]?.stringValue, "a day-old sealed credential is not replayed")
        XCTAssertEqual(try senderKeyCount(t.id), 2)
        let fresh = call("POST", "/v1/remote-updates/sender-keys", body, as: t.master)
        XCTAssertEqual(fresh.headers["idempotent-replayed"], "true", "the key is live again for 24 h")
        XCTAssertEqual(fresh["credential"]?.stringValue, later["credential"]?.stringValue)
        // Another body under an expired key is a new request too, not 422.
        _ = try env.db.system { c in try c.execute("UPDATE idempotency_records SET expires_at = now() - interval '1 second' WHERE key = 'day-old'") }
        var other = body.objectValue!
        other["label"] = "new"
        XCTAssertEqual(call("POST", "/v1/remote-updates/sender-keys", .object(other), as: t.master).status, 201)
        // And the purge removes what is past its retention.
        _ = try env.db.system { c in try c.execute("UPDATE idempotency_records SET expires_at = now() - interval '1 second' WHERE key = 'day-old'") }
        XCTAssertEqual(try env.db.system { c in try IdempotencyStore.purgeExpired(c) }, 1)
        XCTAssertEqual(try env.db.system { c in try c.query("SELECT 1 AS one FROM idempotency_records WHERE key = 'day-old'").count }, 0)
    }

    func testBadSenderKeyInputNamesTheField() throws {
        let t = try tenant()
        let other = try tenant(name: "Other")
        let st = try Fixtures.startTarget(env, tenant: t.id)
        let foreignSt = try Fixtures.startTarget(env, tenant: other.id)
        let absentSt = Identifier.make(.startTarget)

        func post(_ changes: [String: JSONValue?]) -> TestEnvironment.Reply {
            var b: [String: JSONValue] = [
                "targets": [.string(st)], "created_from": [], "permissions": ["activities:start"],
                "idempotency_key": ikey()
            ]
            for (k, v) in changes { b[k] = v }
            return call("POST", "/v1/remote-updates/sender-keys", .object(b), as: t.master)
        }
        func expect400(_ changes: [String: JSONValue?], field: String, line: UInt = #line) {
            let r = post(changes)
            XCTAssertEqual(r.status, 400, r.text, line: line)
            XCTAssertEqual(r.errorCode, "INVALID_REQUEST", line: line)
            XCTAssertEqual(r.field, field, r.text, line: line)
        }

        expect400(["permissions": ["activities:fly"]], field: "permissions.0")
        expect400(["permissions": ["activities:start", "activities:fly"]], field: "permissions.1")
        expect400(["permissions": []], field: "permissions")
        expect400(["permissions": nil], field: "permissions")
        expect400(["targets": [.string(foreignSt)]], field: "targets.0")
        expect400(["targets": [.string(absentSt)]], field: "targets.0")
        expect400(["targets": ["st_not-an-id"]], field: "targets.0")
        expect400(["targets": [.string(st), "sk_00000000000000000000000000"]], field: "targets.1")
        expect400(["created_from": [.string(Identifier.make(.target))]], field: "created_from.0")
        expect400(["created_from": [.string(foreignSt)]], field: "created_from.0")
        expect400(["expires_at": .string(Timestamp.format(Date().addingTimeInterval(-60)))], field: "expires_at")
        expect400(["expires_at": "tomorrow"], field: "expires_at")
        expect400(["label": .string(String(repeating: "x", count: 201))], field: "label")
        expect400(["colour": "blue"], field: "colour")
        expect400(["idempotency_key": nil], field: "idempotency_key")
        expect400(["idempotency_key": ""], field: "idempotency_key")
        expect400(["idempotency_key": .string(String(repeating: "k", count: 256))], field: "idempotency_key")

        // Another tenant's id and a nonexistent id are indistinguishable (no existence leak).
        let foreign = post(["targets": [.string(foreignSt)]]), absent = post(["targets": [.string(absentSt)]])
        XCTAssertEqual(foreign.status, absent.status)
        XCTAssertEqual(
            foreign.json["error"]?["message"]?.stringValue?.replacingOccurrences(of: foreignSt, with: "<id>"),
            absent.json["error"]?["message"]?.stringValue?.replacingOccurrences(of: absentSt, with: "<id>"))
        XCTAssertEqual(foreign.json["error"]?["details"], absent.json["error"]?["details"])
        XCTAssertEqual(try senderKeyCount(t.id), 0, "no bad request created a key")

        // The limits themselves pass.
        let label200 = post(["label": .string(String(repeating: "x", count: 200))])
        XCTAssertEqual(label200.status, 201, label200.text)
        XCTAssertEqual(label200["label"]?.stringValue?.count, 200)
        let key255 = post(["idempotency_key": .string(String(repeating: "k", count: 255))])
        XCTAssertEqual(key255.status, 201, key255.text)
        let future = post(["expires_at": "2999-01-01T01:00:00+01:00"])
        XCTAssertEqual(future.status, 201, future.text)
        XCTAssertEqual(future["expires_at"]?.stringValue, "2999-01-01T00:00:00.000Z", "normalised to UTC")
        XCTAssertEqual(try senderKeyCount(t.id), 3)
    }

    private func collect(_ r: TestEnvironment.Reply) {
        if let c = r["credential"]?.stringValue { remember(c) }
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence s: [UInt8]) -> Bool {
        guard !s.isEmpty, s.count <= count else { return false }
        for i in 0...(count - s.count) where self[i..<(i + s.count)].elementsEqual(s) { return true }
        return false
    }
}
