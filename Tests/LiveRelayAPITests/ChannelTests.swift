import Foundation
import XCTest
import LiveRelayTestSupport
import Delivery
import JSON
import LiveRelayCore
@testable import LiveRelayAPI
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Locking

/// APNs channel management and broadcasts recorded in memory (the API tests' stand-in for the
/// sandbox; the end-to-end tests use the real sandbox over HTTP/2).
final class RecordingChannels: ChannelManaging, BroadcastSending, Sendable {
    let created = Locked<[String]>([])
    let deleted = Locked<[String]>([])
    let broadcasts = Locked<[BroadcastRequest]>([])
    let refuseCreate = Locked<(Int, String)?>(nil)
    /// When set, every create answers this (no channel is made).
    let answerCreate = Locked<ChannelManagementResult?>(nil)
    let broadcastAnswer = Locked<BroadcastResult?>(nil)
    /// When set, every delete answers this (the channel is not recorded as deleted).
    let deleteAnswer = Locked<ChannelManagementResult?>(nil)

    func createChannel(tenantId: String, appId: String, environment: String, storagePolicy: Int) -> ChannelManagementResult {
        if let (s, r) = refuseCreate.withLock({ $0 }) { return .refused(status: s, reason: r) }
        if let a = answerCreate.withLock({ $0 }) { return a }
        let id = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        created.withLock { $0.append(id) }
        return .ok(channelId: id)
    }
    func deleteChannel(tenantId: String, appId: String, environment: String, apnsChannelId: String) -> ChannelManagementResult {
        if let a = deleteAnswer.withLock({ $0 }) { return a }
        deleted.withLock { $0.append(apnsChannelId) }
        return .ok(channelId: apnsChannelId)
    }
    func broadcast(_ request: BroadcastRequest) -> BroadcastResult {
        broadcasts.withLock { $0.append(request) }
        return broadcastAnswer.withLock { $0 } ?? .accepted(requestId: request.requestId, uniqueId: UUID().uuidString.lowercased())
    }
}

/// A tenant with channel members of every kind, made straight in the database like
/// `LifecycleWorld` (app `com.example.app`, sandbox, activity type `delivery`).
struct ChannelWorld {
    let env: TestEnvironment
    let tenant: TestEnvironment.Tenant
    let fake: RecordingChannels

    struct Member { let installationId: String; let credential: String; let startTargetId: String; let templateVersion: String }

    static func make(quota: Int64 = 100_000) throws -> ChannelWorld {
        let fake = RecordingChannels()
        let env = try TestEnvironment.make(channels: fake)
        return ChannelWorld(env: env, tenant: try env.tenant(quota: quota), fake: fake)
    }

    /// An installation of `platform` reporting `osVersion`, with a ready start target.
    func member(
        platform: String = "ios", osVersion: String? = nil, schema: JSONValue? = nil, activityType: String = "delivery",
        attributesType: String = "DeliveryAttributes"
    ) throws -> Member {
        let inst = try Fixtures.installation(env, publishable: tenant.publishable, platform: platform)
        let st = Identifier.make(.startTarget), tv = "tv_" + Identifier.makeBody()
        let t = tenant.id
        try env.db.tenant(t) { c in
            try c.execute(
                "UPDATE installations SET os_version = $3, fcm_token = $4 WHERE tenant_id = $1 AND id = $2",
                [t, inst.id, osVersion, platform == "android" ? "fcm-\(inst.id)" : nil])
            try c.execute("INSERT INTO bindings (tenant_id, installation_id, id) VALUES ($1, $2, 'bnd_widget')", [t, inst.id])
            try c.execute(
                """
                INSERT INTO template_versions (tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest,
                                               schema, bundle_bytes, bundle_modules, bundle_files)
                VALUES ($1, $2, 'bnd_widget', $3, $4, $5, 'sha256:00', $6::jsonb, 10, 1, 1)
                """, [t, inst.id, tv, activityType, attributesType, schema?.jsonString])
            try c.execute(
                """
                INSERT INTO start_targets (tenant_id, id, installation_id, binding_id, activity_type, current_template_version, push_to_start_token, status)
                VALUES ($1, $2, $3, 'bnd_widget', $4, $5, $6, 'ready')
                """, [t, st, inst.id, activityType, tv, platform == "ios" ? "pts-\(inst.id)" : nil])
        }
        return Member(installationId: inst.id, credential: inst.credential, startTargetId: st, templateVersion: tv)
    }

    func createChannel(schema: JSONValue? = nil, storagePolicy: String? = nil, key: String = UUID().uuidString) -> TestEnvironment.Reply {
        var o: [String: JSONValue] = [
            "app_id": "com.example.app", "environment": "sandbox", "activity_type": "delivery",
            "attributes_type": "DeliveryAttributes", "idempotency_key": .string(key)
        ]
        if let schema { o["schema"] = schema }
        if let storagePolicy { o["storage_policy"] = .string(storagePolicy) }
        return env.call("POST", "/v1/remote-updates/channels", .object(o), as: tenant.master)
    }

    func channel(schema: JSONValue? = nil) throws -> String {
        let r = createChannel(schema: schema)
        guard r.status == 201, let id = r["id"]?.stringValue else { throw FixtureFailure("channel creation failed: \(r.status)") }
        return id
    }

    func sender(_ ids: [String], permissions: [String] = Permission.allCases.map(\.rawValue)) throws -> Fixtures.Key {
        try Fixtures.senderKey(env, master: tenant.master, targets: ids, createdFrom: ids.filter { $0.hasPrefix("st_") }, permissions: permissions)
    }

    func start(_ m: Member, channel: String?, as key: Fixtures.Key, state: JSONValue = ["eta": 1]) -> TestEnvironment.Reply {
        var o: [String: JSONValue] = [
            "start_target_id": .string(m.startTargetId), "template_version": .string(m.templateVersion),
            "state": state, "alert": ["title": "Go", "body": "Started"], "idempotency_key": .string(UUID().uuidString)
        ]
        if let channel { o["channel_id"] = .string(channel) }
        return env.call("POST", "/v1/remote-updates/live-activities/start", .object(o), as: key.credential)
    }

    func update(_ ch: String, _ state: JSONValue, revision: Int64, as key: Fixtures.Key, extra: [String: JSONValue] = [:]) -> TestEnvironment.Reply {
        var o: [String: JSONValue] = ["state": state, "expected_revision": .int(revision), "idempotency_key": .string(UUID().uuidString)]
        for (k, v) in extra { o[k] = v }
        return env.call("POST", "/v1/remote-updates/channels/\(ch)/update", .object(o), as: key.credential)
    }

    func count(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> Int {
        try env.db.system { c in try c.query(sql, params)[0].int("n") }
    }

    /// After a create that APNs refused or never answered: no channel is stored, not even the
    /// idempotency key, so once `heal` lets the fake accept, the same `key` creates the channel.
    func assertNothingStored(retrying key: String, after heal: () -> Void, line: UInt = #line) throws {
        XCTAssertEqual(try count("SELECT count(*) AS n FROM channels"), 0, line: line)
        heal()
        XCTAssertEqual(createChannel(key: key).status, 201, line: line)
    }

    /// A channel worker on this database with the recording provider (driven by hand in tests).
    func worker(batchSize: Int = 500) -> ChannelWorker {
        ChannelWorker(
            db: env.db, conninfo: env.conninfo, sender: fake, manager: fake,
            configuration: ChannelWorkerConfiguration(workerId: "test-channels", fanoutBatchSize: batchSize),
            metrics: MetricsRegistry(), log: Logger(minimum: .error, sink: { _ in }))
    }
}

/// docs/channels.md rules on real PostgreSQL: resources, writes, joining, coverage, errors at
/// their boundaries, and the fan-out expander's ordering.
final class ChannelTests: XCTestCase {
    func testCreateReadListAndReplay() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let key = UUID().uuidString
        let r = w.createChannel(storagePolicy: "most_recent", key: key)
        XCTAssertEqual(r.status, 201, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["object"]?.stringValue, "channel")
        XCTAssertEqual(r["status"]?.stringValue, "active")
        XCTAssertEqual(r["revision"]?.intValue, 0)
        XCTAssertEqual(r["state_present"], false)
        XCTAssertEqual(r["storage_policy"]?.stringValue, "most_recent")
        XCTAssertEqual(r["apns_channel_id"]?.stringValue, w.fake.created.withLock { $0.first })
        XCTAssertEqual(r["members"], ["broadcast": 0, "fanout": 0, "ended": 0])
        let again = w.createChannel(storagePolicy: "most_recent", key: key)
        XCTAssertEqual(again.status, 201)
        XCTAssertEqual(again.headers["idempotent-replayed"], "true")
        XCTAssertEqual(again["id"], r["id"])
        XCTAssertEqual(w.fake.created.withLock { $0.count }, 1, "a replay creates no second APNs channel")
        let id = r["id"]!.stringValue!
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(id)", as: w.tenant.master).status, 200)
        let list = w.env.call("GET", "/v1/remote-updates/channels", as: w.tenant.master)
        XCTAssertEqual(list["data"]?.arrayValue?.count, 1)
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/ch_00000000000000000000000000", as: w.tenant.master).errorCode, "NOT_FOUND")
        // Another tenant's channel is absent.
        let other = try w.env.tenant(name: "Other")
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(id)", as: other.master).status, 404)
        // Shape: unknown field and bad storage policy name their field.
        let bad = w.env.call(
            "POST", "/v1/remote-updates/channels",
            [
                "app_id": "a", "environment": "sandbox", "activity_type": "x",
                "attributes_type": "y", "storage_policy": "all", "idempotency_key": "k"
            ],
            as: w.tenant.master)
        XCTAssertEqual(bad.json["error"]?["details"]?["field"]?.stringValue, "storage_policy")
        XCTAssertEqual(
            w.env.call(
                "POST", "/v1/remote-updates/channels",
                [
                    "schema": ["type": "object", "pattern": "x"], "app_id": "a",
                    "environment": "sandbox", "activity_type": "x", "attributes_type": "y",
                    "idempotency_key": "k2"
                ], as: w.tenant.master
            ).errorCode, "INVALID_STATE_SCHEMA")
    }

    func testProviderRefusalStoresNothing() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        w.fake.refuseCreate.withLock { $0 = (403, "InvalidProviderToken") }
        let r = w.createChannel(key: "refused")
        XCTAssertEqual(r.status, 502)
        XCTAssertEqual(r.errorCode, "PROVIDER_ERROR")
        XCTAssertEqual(r.json["error"]?["details"]?["provider_status"]?.intValue, 403)
        XCTAssertEqual(r.json["error"]?["details"]?["provider_reason"]?.stringValue, "InvalidProviderToken")
        try w.assertNothingStored(retrying: "refused") { w.fake.refuseCreate.withLock { $0 = nil } }
    }

    /// APNs made the channel but LiveRelay's transaction did not commit (here the insert fails):
    /// the APNs channel is deleted again, so none is left that no LiveRelay channel names, and
    /// the same idempotency key then creates exactly one channel. Before, every such attempt
    /// leaked one APNs channel.
    func testAnAPNsChannelWhoseCreationDidNotCommitIsDeleted() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        _ = try w.env.db.system { c in
            try c.execute(
                "CREATE FUNCTION lr_test_refuse_channel() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$")
            try c.execute("CREATE TRIGGER lr_test_refuse_channel BEFORE INSERT ON channels FOR EACH ROW EXECUTE FUNCTION lr_test_refuse_channel()")
        }
        let failed = w.createChannel(key: "rolled-back")
        XCTAssertGreaterThanOrEqual(failed.status, 500, "\(failed.json)")
        let made = w.fake.created.withLock { $0 }
        XCTAssertEqual(made.count, 1)
        let deadline = Date().addingTimeInterval(10)
        while w.fake.deleted.withLock({ $0.isEmpty }) && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertEqual(w.fake.deleted.withLock { $0 }, made, "the APNs channel of the creation that rolled back is deleted")
        XCTAssertEqual(try w.count("SELECT count(*) AS n FROM channels"), 0)
        _ = try w.env.db.system { c in try c.execute("DROP TRIGGER lr_test_refuse_channel ON channels") }
        let ok = w.createChannel(key: "rolled-back")
        XCTAssertEqual(ok.status, 201, "\(ok.json)")
        XCTAssertEqual(w.fake.created.withLock { $0.count }, 2)
        // A creation whose COMMIT's outcome was unknown but which did commit: the hook finds the
        // stored channel and keeps its APNs channel.
        let kept = try XCTUnwrap(ok["apns_channel_id"]?.stringValue)
        ChannelHandlers.deleteUnstoredAPNsChannel(
            db: w.env.db, channels: w.fake, log: Logger(minimum: .error, sink: { _ in }), tenantId: w.tenant.id, appId: "com.example.app",
            environment: "sandbox", apnsChannelId: kept)
        Thread.sleep(forTimeInterval: 2.5)  // past the rolled-back hook's wait: nothing else may be deleted
        XCTAssertEqual(w.fake.deleted.withLock { $0 }, made, "a creation that committed keeps its APNs channel")
        XCTAssertEqual(ok["apns_channel_id"]?.stringValue, w.fake.created.withLock { $0.last })
    }

    /// No credential lists the app: the tenant's set-up, so `400` naming `app_id` (never a
    /// 5xx); no answer from APNs: `502 PROVIDER_ERROR` with null provider status. Neither stores.
    func testMissingCredentialIsTheCallersErrorAndNoAnswerIsAProviderError() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        w.fake.answerCreate.withLock { $0 = .noCredentials(message: "no APNs credential lists topic com.example.app") }
        let missing = w.createChannel(key: "nocred")
        XCTAssertEqual(missing.status, 400)
        XCTAssertEqual(missing.errorCode, "INVALID_REQUEST")
        XCTAssertEqual(missing.json["error"]?["details"]?["field"]?.stringValue, "app_id")
        XCTAssertTrue(missing.json["error"]?["message"]?.stringValue?.contains("provider-credentials/apns") ?? false, "\(missing.json)")
        w.fake.answerCreate.withLock { $0 = .unavailable(message: "connection refused") }
        let down = w.createChannel(key: "down")
        XCTAssertEqual(down.status, 502)
        XCTAssertEqual(down.errorCode, "PROVIDER_ERROR")
        XCTAssertEqual(down.json["error"]?["details"]?["provider_status"], .null)
        try w.assertNothingStored(retrying: "nocred") { w.fake.answerCreate.withLock { $0 = nil } }
    }

    func testChannelLimitAtItsBoundary() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let cap = ChannelRules.maxActiveChannelsPerApp
        try w.env.db.tenant(w.tenant.id) { c in
            try c.execute(
                """
                INSERT INTO channels (tenant_id, id, app_id, environment, activity_type, attributes_type, apns_channel_id)
                SELECT $1, 'ch_x' || g, 'com.example.app', 'sandbox', 'delivery', 'DeliveryAttributes', 'apns' || g FROM generate_series(1, $2) g
                """, [w.tenant.id, cap - 1])
            // Ended channels and other environments do not count.
            try c.execute(
                """
                INSERT INTO channels (tenant_id, id, app_id, environment, activity_type, attributes_type, apns_channel_id, status)
                VALUES ($1, 'ch_ended', 'com.example.app', 'sandbox', 'delivery', 'DeliveryAttributes', 'e', 'ended'),
                       ($1, 'ch_prod', 'com.example.app', 'production', 'delivery', 'DeliveryAttributes', 'p', 'active')
                """, [w.tenant.id])
        }
        XCTAssertEqual(w.createChannel().status, 201, "the 10,000th active channel")
        let over = w.createChannel()
        XCTAssertEqual(over.status, 409)
        XCTAssertEqual(over.errorCode, "CHANNEL_LIMIT")
        XCTAssertEqual(over.json["error"]?["details"]?["limit"]?.intValue, Int64(cap))
        XCTAssertEqual(w.fake.created.withLock { $0.count }, 1, "no APNs channel is made over the limit")
    }

    func testSenderKeyCoverageOfChannels() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel(), other = try w.channel()
        let key = try w.sender([ch])
        let list = w.env.call("GET", "/v1/remote-updates/channels", as: key.credential)
        XCTAssertEqual(list["data"]?.arrayValue?.compactMap { $0["id"]?.stringValue }, [ch], "a sender key sees only the channels it names")
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(other)", as: key.credential).status, 403)
        XCTAssertEqual(w.update(other, ["eta": 1], revision: 0, as: key).status, 403)
        XCTAssertEqual(w.update(ch, ["eta": 1], revision: 0, as: key).status, 202)
        let readOnly = try w.sender([ch], permissions: ["activities:read-state"])
        XCTAssertEqual(w.update(ch, ["eta": 2], revision: 1, as: readOnly).errorCode, "PERMISSION_DENIED")
        let snap = w.env.call("GET", "/v1/remote-updates/channels/\(ch)/snapshot", as: readOnly.credential)
        XCTAssertEqual(snap.status, 200)
        XCTAssertEqual(snap["state"], ["eta": 1])
        XCTAssertEqual(snap["revision"]?.intValue, 1)
        let noRead = try w.sender([ch], permissions: ["activities:update"])
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(ch)/snapshot", as: noRead.credential).status, 403)
        XCTAssertEqual(
            w.env.call("GET", "/v1/remote-updates/channels/\(ch)/snapshot", as: w.tenant.master).status, 403,
            "a master key never reads business state")
        // A sender key naming an unknown channel is refused at creation.
        let bad = w.env.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": ["ch_00000000000000000000000000"], "created_from": [],
                "permissions": ["activities:update"], "idempotency_key": "x"
            ], as: w.tenant.master)
        XCTAssertEqual(bad.json["error"]?["details"]?["field"]?.stringValue, "targets.0")
        // A start into a channel needs the channel in targets too.
        let m = try w.member(osVersion: "18.0")
        let startOnly = try w.sender([m.startTargetId])
        let r = w.start(m, channel: ch, as: startOnly)
        XCTAssertEqual(r.status, 403, String(decoding: r.raw, as: UTF8.self))
    }

    func testWriteRulesInOrder() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel(schema: ["type": "object", "properties": ["eta": ["type": "integer"]], "required": ["eta"]])
        let key = try w.sender([ch])
        // Shape: priority 1 is accepted only on channels; 2 is refused naming the field.
        XCTAssertEqual(
            w.update(ch, ["eta": 1], revision: 0, as: key, extra: ["priority": 2]).json["error"]?["details"]?["field"]?.stringValue, "priority")
        XCTAssertEqual(w.update(ch, ["eta": 1], revision: 0, as: key, extra: ["bogus": 1]).errorCode, "INVALID_REQUEST")
        let ok = w.update(ch, ["eta": 1], revision: 0, as: key, extra: ["priority": 1])
        XCTAssertEqual(ok.status, 202, String(decoding: ok.raw, as: UTF8.self))
        XCTAssertEqual(ok["channel_operation"]?["object"]?.stringValue, "channel_operation")
        XCTAssertEqual(ok["channel_operation"]?["priority"]?.intValue, 1)
        XCTAssertEqual(ok["channel_operation"]?["status"]?.stringValue, "queued")
        XCTAssertEqual(ok["channel"]?["revision"]?.intValue, 1)
        // expected_revision.
        let stale = w.update(ch, ["eta": 2], revision: 0, as: key)
        XCTAssertEqual(stale.errorCode, "REVISION_CONFLICT")
        XCTAssertEqual(stale.json["error"]?["details"]?["current_revision"]?.intValue, 1)
        // Schema.
        let bad = w.update(ch, ["eta": "soon"], revision: 1, as: key)
        XCTAssertEqual(bad.status, 422)
        XCTAssertEqual(bad.errorCode, "STATE_SCHEMA_MISMATCH")
        // The 4096-byte pre-check, at its boundary: the largest padding that fits (measured by the
        // same builder) is accepted, one byte more is 413.
        let free = try w.channel()
        let fkey = try w.sender([free])
        var n = 0
        while (try? ChannelRequests.checkPayload(
            channelId: free, event: .update, state: ["eta": 1, "pad": .string(String(repeating: "x", count: n + 1))],
            alert: nil, staleAt: nil, relevanceScore: nil, dismissAt: nil, now: Date())) != nil
        { n += 1 }
        let over = w.update(free, ["eta": 1, "pad": .string(String(repeating: "x", count: n + 1))], revision: 0, as: fkey)
        XCTAssertEqual(over.status, 413)
        XCTAssertEqual(over.json["error"]?["details"]?["limit"]?.intValue, 4096)
        XCTAssertEqual(w.update(free, ["eta": 1, "pad": .string(String(repeating: "x", count: n))], revision: 0, as: fkey).status, 202)
        // Idempotent replay returns the original 202.
        let k = UUID().uuidString
        let body: JSONValue = ["state": ["eta": 5], "expected_revision": 1, "idempotency_key": .string(k)]
        let first = w.env.call("POST", "/v1/remote-updates/channels/\(ch)/update", body, as: key.credential)
        XCTAssertEqual(first.status, 202)
        let replay = w.env.call("POST", "/v1/remote-updates/channels/\(ch)/update", body, as: key.credential)
        XCTAssertEqual(replay.status, 202)
        XCTAssertEqual(replay.headers["idempotent-replayed"], "true")
        XCTAssertEqual(replay["channel_operation"]?["id"], first["channel_operation"]?["id"])
        // End, then every write or start into it → CHANNEL_ENDED.
        let end = w.env.call("POST", "/v1/remote-updates/channels/\(ch)/end", ["idempotency_key": "e1"], as: w.tenant.master)
        XCTAssertEqual(end.status, 202, String(decoding: end.raw, as: UTF8.self))
        XCTAssertEqual(end["channel"]?["status"]?.stringValue, "ending")
        XCTAssertEqual(w.update(ch, ["eta": 3], revision: 2, as: key).errorCode, "CHANNEL_ENDED")
        let m = try w.member(osVersion: "17.5")
        let sk = try w.sender([m.startTargetId, ch])
        XCTAssertEqual(w.start(m, channel: ch, as: sk).errorCode, "CHANNEL_ENDED")
    }

    func testQuotaNeedsOnePlusFanoutMembers() throws {
        let w = try ChannelWorld.make(quota: 4)
        defer { w.env.tearDown() }
        let ch = try w.channel()
        var ids = [ch]
        var members: [ChannelWorld.Member] = []
        for _ in 0..<2 { let m = try w.member(osVersion: "17.0"); members.append(m); ids.append(m.startTargetId) }
        let key = try w.sender(ids)
        for m in members { XCTAssertEqual(w.start(m, channel: ch, as: key).status, 202) }  // 2 units reserved by the starts
        let got = w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)
        XCTAssertEqual(got["members"]?["fanout"]?.intValue, 2)
        // 4 − 2 = 2 units remain; the write needs 1 + 2 = 3.
        let r = w.update(ch, ["eta": 1], revision: 0, as: key)
        XCTAssertEqual(r.status, 429)
        XCTAssertEqual(r.errorCode, "QUOTA_EXCEEDED")
        // The operator raises the quota by one: exactly enough.
        _ = try w.env.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 5 WHERE tenant_id = $1", [w.tenant.id]) }
        XCTAssertEqual(w.update(ch, ["eta": 1], revision: 0, as: key).status, 202)
        // A stateless end is free.
        _ = try w.env.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 0 WHERE tenant_id = $1", [w.tenant.id]) }
        XCTAssertEqual(w.env.call("POST", "/v1/remote-updates/channels/\(ch)/end", ["idempotency_key": "e"], as: key.credential).status, 202)
    }

    /// A state-bearing channel write reserves its broadcast's quota unit as it commits
    /// (migration 0037, docs/channels.md "Quota"): with 3 units and no member, three alert
    /// writes fit and the fourth is refused before any broadcast went out (before, all four got
    /// 202). An accepted broadcast turns its unit into a used one; a failed one gives it back.
    func testAChannelWriteReservesItsBroadcastUnitUntilTheBroadcastFinishes() throws {
        let w = try ChannelWorld.make(quota: 3)
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let key = try w.sender([ch])
        var revision: Int64 = 0
        func alertWrite() -> TestEnvironment.Reply {
            let r = w.update(ch, ["eta": .int(revision)], revision: revision, as: key, extra: ["alert": ["title": "Goal", "body": "1-0"]])
            if r.status == 202 { revision += 1 }
            return r
        }
        func usage() -> (reserved: Int64?, used: Int64?) {
            let u = w.env.call("GET", "/v1/remote-updates/usage", as: w.tenant.master)
            return (u["reserved"]?.intValue, u["used"]?.intValue)
        }
        for _ in 0..<3 { XCTAssertEqual(alertWrite().status, 202) }
        XCTAssertEqual(usage().reserved, 3)
        XCTAssertEqual(alertWrite().errorCode, "QUOTA_EXCEEDED", "every unit is reserved by a queued broadcast")
        // APNs accepts the oldest broadcast: its unit is used now, still none remains.
        let worker = w.worker()
        XCTAssertTrue(worker.broadcastOnce())
        XCTAssertEqual(usage().reserved, 2)
        XCTAssertEqual(usage().used, 1)
        XCTAssertEqual(alertWrite().errorCode, "QUOTA_EXCEEDED")
        // APNs refuses the next one for good: its unit comes back, and one write fits again.
        w.fake.broadcastAnswer.withLock { $0 = .refused(status: 400, reason: "BadPriority", retryAfterSeconds: nil) }
        XCTAssertTrue(worker.broadcastOnce())
        w.fake.broadcastAnswer.withLock { $0 = nil }
        XCTAssertEqual(usage().reserved, 1)
        XCTAssertEqual(usage().used, 1)
        XCTAssertEqual(alertWrite().status, 202)
        XCTAssertEqual(alertWrite().errorCode, "QUOTA_EXCEEDED")
        // A state-only write supersedes the queued state-only broadcast before it (never an
        // alert's), which gives its unit back; a stateless end supersedes every queued
        // broadcast and reserves nothing.
        _ = try w.env.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 5 WHERE tenant_id = $1", [w.tenant.id]) }
        XCTAssertEqual(w.update(ch, ["eta": 100], revision: revision, as: key).status, 202)
        revision += 1
        XCTAssertEqual(usage().reserved, 3, "two queued alert broadcasts and this one")
        XCTAssertEqual(w.update(ch, ["eta": 101], revision: revision, as: key).status, 202)
        revision += 1
        XCTAssertEqual(usage().reserved, 3, "the superseded broadcast gave its unit back")
        XCTAssertEqual(w.env.call("POST", "/v1/remote-updates/channels/\(ch)/end", ["idempotency_key": "e"], as: key.credential).status, 202)
        XCTAssertEqual(usage().reserved, 0, "an end supersedes every queued broadcast, and a stateless one holds nothing")
        XCTAssertEqual(usage().used, 1)
        // APNs no longer knows a channel with two alert writes queued: the broadcast that learns
        // it fails and the channel's other queued broadcasts are cancelled, in one transaction;
        // both units come back, once each.
        let gone = try w.channel()
        let goneKey = try w.sender([gone])
        for rev in 0..<2 {
            let r = w.update(gone, ["eta": .int(Int64(rev))], revision: Int64(rev), as: goneKey, extra: ["alert": ["title": "T", "body": "B"]])
            XCTAssertEqual(r.status, 202, String(decoding: r.raw, as: UTF8.self))
        }
        XCTAssertEqual(usage().reserved, 2)
        w.fake.broadcastAnswer.withLock { $0 = .refused(status: 400, reason: "BadChannelId", retryAfterSeconds: nil) }
        while worker.broadcastOnce() {}
        w.fake.broadcastAnswer.withLock { $0 = nil }
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(gone)", as: w.tenant.master)["end_reason"]?.stringValue, "channel_invalid")
        XCTAssertEqual(usage().reserved, 0)
        XCTAssertEqual(usage().used, 1)
    }

    func testJoiningDecidesDeliveryAndChecksMismatch() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let ios18 = try w.member(osVersion: "18.2"), ios17 = try w.member(osVersion: "17.6"), unknown = try w.member()
        let android = try w.member(platform: "android")
        let otherType = try w.member(osVersion: "18.0", activityType: "ride")
        let otherAttrs = try w.member(osVersion: "18.0", attributesType: "RideAttributes")
        let schemaed = try w.member(osVersion: "18.0", schema: ["type": "object"])
        let all = [ios18, ios17, unknown, android, otherType, otherAttrs, schemaed]
        let key = try w.sender(all.map(\.startTargetId) + [ch])
        func delivery(_ m: ChannelWorld.Member) -> String? {
            let r = w.start(m, channel: ch, as: key)
            XCTAssertEqual(r.status, 202, String(decoding: r.raw, as: UTF8.self))
            XCTAssertEqual(r["target"]?["channel_id"]?.stringValue, ch)
            return r["target"]?["delivery"]?.stringValue
        }
        XCTAssertEqual(delivery(ios18), "broadcast")
        XCTAssertEqual(delivery(ios17), "fanout")
        XCTAssertEqual(delivery(unknown), "fanout", "no os_version reported: fan-out")
        XCTAssertEqual(delivery(android), "fanout")
        for (m, field) in [(otherType, "activity_type"), (otherAttrs, "attributes_type"), (schemaed, "schema")] {
            let r = w.start(m, channel: ch, as: key)
            XCTAssertEqual(r.errorCode, "CHANNEL_MISMATCH")
            XCTAssertEqual(r.json["error"]?["details"]?["field"]?.stringValue, field)
        }
        // The iOS 18 start push carries input-push-channel instead of input-push-token.
        let apns = try w.env.db.system { c in try c.query("SELECT apns_channel_id FROM channels WHERE id = $1", [ch])[0].string("apns_channel_id") }
        let picked = try w.env.db.system { c in
            try DispatchStore.claim(c, worker: "w", limit: 10, leaseSeconds: 30, now: Date())
        }
        let b = try XCTUnwrap(picked.first { $0.inputPushChannel != nil })
        XCTAssertEqual(b.inputPushChannel, apns)
        let push = try DispatchPush.build(b, now: Date(), defaultExpirationSeconds: 3600)
        let aps = try JSONValue.parse(push.apnsBody!)["aps"]
        XCTAssertEqual(aps?["input-push-channel"]?.stringValue, apns)
        XCTAssertNil(aps?["input-push-token"])
        let counts = w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)["members"]
        XCTAssertEqual(counts, ["broadcast": 1, "fanout": 3, "ended": 0])
        let members = w.env.call("GET", "/v1/remote-updates/channels/\(ch)/members?limit=2", as: w.tenant.master)
        XCTAssertEqual(members["data"]?.arrayValue?.count, 2)
        XCTAssertNotNil(members["next_cursor"]?.stringValue)
        // Local start reservation into the channel: broadcast, ready at once.
        let local = w.env.call(
            "POST", "/v1/installations/\(ios17.installationId)/targets",
            [
                "activity_type": "delivery", "business_key": "order:1", "business_generation": "1", "idempotency_key": "r1",
                "state": ["eta": 1], "channel_id": .string(ch)
            ], as: ios17.credential)
        XCTAssertEqual(local.status, 201, String(decoding: local.raw, as: UTF8.self))
        XCTAssertEqual(local["delivery"]?.stringValue, "broadcast")
        XCTAssertEqual(local["status"]?.stringValue, "ready")
    }

    /// `GET …/members` shows a sender key only the members it covers, as listTargets does
    /// (docs/channels.md "Resources"): a key that covers the channel but not a member never sees
    /// that member's business key, installation or start target.
    func testTheMemberListShowsASenderKeyOnlyWhatItCovers() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let a = try w.member(osVersion: "17.0"), b = try w.member(osVersion: "17.0")
        let starter = try w.sender([a.startTargetId, b.startTargetId, ch])
        let first = try XCTUnwrap(w.start(a, channel: ch, as: starter)["target"]?["id"]?.stringValue)
        let second = try XCTUnwrap(w.start(b, channel: ch, as: starter)["target"]?["id"]?.stringValue)
        func listed(_ key: Fixtures.Key?) -> [String] {
            let r = w.env.call("GET", "/v1/remote-updates/channels/\(ch)/members", as: key?.credential ?? w.tenant.master)
            XCTAssertEqual(r.status, 200, String(decoding: r.raw, as: UTF8.self))
            return (r["data"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }.sorted()
        }
        XCTAssertEqual(listed(nil), [first, second].sorted(), "the master key sees every member")
        XCTAssertEqual(listed(starter), [first, second].sorted(), "created_from covers the members this key started")
        XCTAssertEqual(listed(try w.sender([ch])), [], "a key covering only the channel sees no member")
        XCTAssertEqual(listed(try w.sender([ch, second])), [second], "a target id in targets covers that member")
    }

    func testMembersAreDrivenByTheirChannelOnly() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let m = try w.member(osVersion: "17.0")
        let key = try w.sender([m.startTargetId, ch])
        let tgt = try XCTUnwrap(w.start(m, channel: ch, as: key)["target"]?["id"]?.stringValue)
        let up = w.env.call(
            "POST", "/v1/remote-updates/live-activities/update",
            [
                "target_id": .string(tgt), "state": ["eta": 2],
                "expected_revision": 1, "idempotency_key": "u"
            ],
            as: key.credential)
        XCTAssertEqual(up.errorCode, "TARGET_ON_CHANNEL")
        XCTAssertEqual(up.json["error"]?["details"]?["channel_id"]?.stringValue, ch)
        let end = w.env.call(
            "POST", "/v1/remote-updates/live-activities/end", ["target_id": .string(tgt), "idempotency_key": "e"],
            as: w.tenant.master)
        XCTAssertEqual(end.errorCode, "TARGET_ON_CHANNEL")
        // A device's local end still ends its own target.
        let local = w.env.call("POST", "/v1/installations/\(m.installationId)/targets/\(tgt)/ended", ["idempotency_key": "le"], as: m.credential)
        XCTAssertTrue([200, 202].contains(local.status), String(decoding: local.raw, as: UTF8.self))
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)["members"]?["ended"]?.intValue, 1)
    }

    /// The 202 of a channel write touches no member row; the expander then walks the members in
    /// keyset batches, and under 20 rapid writes (every third with an alert) each member gets
    /// every alert and the newest state, never an older write after a newer one.
    func testFanoutOrderingUnderRapidWrites() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        var members: [ChannelWorld.Member] = []
        for i in 0..<5 { members.append(try w.member(platform: i == 4 ? "android" : "ios", osVersion: i == 0 ? "18.1" : "17.2")) }
        let key = try w.sender(members.map(\.startTargetId) + [ch])
        for m in members { XCTAssertEqual(w.start(m, channel: ch, as: key).status, 202) }
        let worker = w.worker(batchSize: 2)
        var alerts: Set<Int64> = []
        for i in 1...20 {
            let alert: [String: JSONValue] = i % 3 == 0 ? ["alert": ["title": "Goal", "body": .string("\(i)")]] : [:]
            if i % 3 == 0 { alerts.insert(Int64(i)) }
            let opsBefore = try w.count("SELECT count(*) AS n FROM operations")
            XCTAssertEqual(w.update(ch, ["eta": .int(Int64(i))], revision: Int64(i - 1), as: key, extra: alert).status, 202)
            XCTAssertEqual(try w.count("SELECT count(*) AS n FROM operations"), opsBefore, "the write inserts no per-member operation")
            if i == 7 || i == 13 { _ = worker.expandOnce() }  // a walk in progress while newer writes arrive
        }
        while worker.expandOnce() > 0 {}
        XCTAssertEqual(try w.count("SELECT count(*) AS n FROM channel_operations WHERE fanout_state = 'pending'"), 0)
        let fanout = try w.env.db.system { c in
            try c.query(
                """
                SELECT o.target_id, o.seq, o.status, (o.state ->> 'eta')::bigint AS eta, o.alert IS NOT NULL AS has_alert, o.channel_operation_id
                  FROM operations o JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
                 WHERE t.channel_id = $1 AND t.delivery = 'fanout' AND o.kind = 'update' ORDER BY o.target_id, o.seq
                """, [ch])
        }
        var byTarget: [String: [(eta: Int64, alert: Bool, status: String)]] = [:]
        for r in fanout {
            byTarget[try r.string("target_id"), default: []].append((try r.int64("eta"), try r.bool("has_alert"), try r.string("status")))
        }
        XCTAssertEqual(byTarget.count, 4, "four fan-out members (iOS 17 ×3, Android)")
        for (t, ops) in byTarget {
            let etas = ops.map(\.eta)
            XCTAssertEqual(etas, etas.sorted(), "\(t): never an older channel write after a newer one")
            XCTAssertEqual(Set(ops.filter(\.alert).map(\.eta)), alerts, "\(t): every alert is queued")
            let live = ops.filter { $0.status == "queued" }
            XCTAssertEqual(live.last?.eta, 20, "\(t): the newest state is queued")
            XCTAssertTrue(live.dropLast().allSatisfy(\.alert), "\(t): older state-only writes still queued are superseded")
        }
        // The channel operation's fan-out counts sum its per-target operations.
        let ops = w.env.call("GET", "/v1/remote-updates/channels/\(ch)/operations?limit=1", as: w.tenant.master)
        let newest = try XCTUnwrap(ops["data"]?.arrayValue?.first)
        XCTAssertEqual(newest["fanout"]?["members"]?.intValue, 4)
        XCTAssertEqual(newest["fanout"]?["queued"]?.intValue, 4)
        let cop = w.env.call("GET", "/v1/remote-updates/channel-operations/\(newest["id"]!.stringValue!)", as: key.credential)
        XCTAssertEqual(cop.status, 200)
        XCTAssertEqual(cop["fanout"], newest["fanout"])
        // Broadcasts: one per write that was not superseded, in order, priority 1 sent as given.
        while worker.broadcastOnce() {}
        let sent = w.fake.broadcasts.withLock { $0 }
        let etas = try sent.map { try JSONValue.parse($0.body)["aps"]?["content-state"]?["eta"]?.intValue ?? -1 }
        XCTAssertEqual(etas, etas.sorted())
        XCTAssertEqual(etas.last, 20)
        XCTAssertTrue(alerts.isSubset(of: Set(etas)), "alert broadcasts are never coalesced")
        let stamps = try sent.map { try JSONValue.parse($0.body)["aps"]?["timestamp"]?.intValue ?? 0 }
        XCTAssertEqual(stamps, stamps.sorted(), "timestamps increase per channel")
        XCTAssertEqual(Set(stamps).count, stamps.count)
    }

    /// Migration 0029: broadcast claims are shared across tenants. Six older queued broadcasts of
    /// one tenant (six channels, so six channel heads) do not keep another tenant's broadcast out
    /// of a claim of two: each tenant's first due head comes before any tenant's second.
    func testBroadcastClaimsTakeEveryTenantsFirstBeforeAnyTenantsSecond() throws {
        let a = try ChannelWorld.make()
        defer { a.env.tearDown() }
        let b = ChannelWorld(env: a.env, tenant: try a.env.tenant(name: "Other", quota: 100_000), fake: a.fake)
        let aChannels = try (0..<6).map { _ in try a.channel() }
        let aKey = try a.sender(aChannels)
        for ch in aChannels { XCTAssertEqual(a.update(ch, ["eta": 1], revision: 0, as: aKey).status, 202) }
        _ = try a.env.db.system { c in
            try c.execute(
                "UPDATE channel_operations SET broadcast_next_at = now() - interval '1 minute' WHERE tenant_id = $1", [a.tenant.id])
        }
        let bChannel = try b.channel()
        let bKey = try b.sender([bChannel])
        XCTAssertEqual(b.update(bChannel, ["eta": 1], revision: 0, as: bKey).status, 202)
        let claimed = try a.env.db.system { c in
            try BroadcastStore.claim(c, worker: "w-fair", limit: 2, leaseSeconds: 30, now: Date(), rotation: 7)
        }
        XCTAssertEqual(claimed.count, 2)
        XCTAssertEqual(Set(claimed.map(\.op.tenantId)), [a.tenant.id, b.tenant.id], "one of each tenant, not a's two oldest")

        // Two broadcasters at once: the second passes over the head the first holds (locked,
        // not committed) and takes another of a's five remaining heads, instead of nothing.
        let first = try PostgresConnection(a.env.conninfo)
        defer { first.close() }
        try first.execute("BEGIN")
        try first.execute("SELECT set_config('app.scope', 'system', true)")
        let held = try BroadcastStore.claim(first, worker: "w-1", limit: 1, leaseSeconds: 30, now: Date(), rotation: 1)
        let second = try a.env.db.system { c in
            try BroadcastStore.claim(c, worker: "w-2", limit: 1, leaseSeconds: 30, now: Date(), rotation: 1)
        }
        try first.execute("ROLLBACK")
        XCTAssertEqual(held.count, 1)
        XCTAssertEqual(second.count, 1, "a concurrent claim is not left empty by the held head")
        XCTAssertNotEqual(second.first?.op.id, held.first?.op.id)
    }

    /// A channel APNs no longer knows (`400 ChannelNotRegistered`) ends with its members: the
    /// broadcast member can no longer be reached and ends (`token_invalid`); the fan-out member
    /// still has its own token and gets an end through the fan-out walk. Before, both stayed
    /// live and every write that could end them was refused.
    func testAnInvalidChannelEndsItsMembers() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let m18 = try w.member(osVersion: "18.0"), m17 = try w.member(osVersion: "17.0")
        let key = try w.sender([m18.startTargetId, m17.startTargetId, ch])
        let t18 = try XCTUnwrap(w.start(m18, channel: ch, as: key)["target"]?["id"]?.stringValue)
        let t17 = try XCTUnwrap(w.start(m17, channel: ch, as: key)["target"]?["id"]?.stringValue)
        let worker = w.worker()
        XCTAssertEqual(w.update(ch, ["eta": 1], revision: 0, as: key).status, 202)
        w.fake.broadcastAnswer.withLock { $0 = .refused(status: 400, reason: "ChannelNotRegistered", retryAfterSeconds: nil) }
        XCTAssertTrue(worker.broadcastOnce())
        w.fake.broadcastAnswer.withLock { $0 = nil }
        let channel = w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)
        XCTAssertEqual(channel["status"]?.stringValue, "ended")
        XCTAssertEqual(channel["end_reason"]?.stringValue, "channel_invalid")
        let broadcastMember = w.env.call("GET", "/v1/remote-updates/live-activities/targets/\(t18)", as: w.tenant.master)
        XCTAssertEqual(broadcastMember["status"]?.stringValue, "ended", String(decoding: broadcastMember.raw, as: UTF8.self))
        XCTAssertEqual(broadcastMember["end_reason"]?.stringValue, "token_invalid")
        while worker.expandOnce() > 0 {}
        XCTAssertEqual(
            try w.count(
                "SELECT count(*) AS n FROM operations WHERE target_id = $1 AND kind = 'end' AND channel_operation_id IS NOT NULL", [t17]), 1,
            "the fan-out member got an end")
        XCTAssertEqual(
            try w.count(
                "SELECT count(*) AS n FROM channel_operations WHERE channel_id = $1 AND kind = 'end' AND broadcast_status = 'cancelled'", [ch]),
            1, "one end, never broadcast")
    }

    /// A channel deletion APNs refuses with `403` (a credential problem: the channel is still
    /// there) is retried later, the channel staying `ending`; only an accepted delete, or an
    /// answer saying APNs does not have the channel, finishes it. Before, a 403 counted as
    /// deleted and the APNs channel leaked.
    func testADeletionRefusedWith403IsRetriedNotTakenAsDone() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel()
        let key = try w.sender([ch])
        let worker = w.worker()
        let end = w.env.call("POST", "/v1/remote-updates/channels/\(ch)/end", ["idempotency_key": "end-403"], as: key.credential)
        XCTAssertEqual(end.status, 202, String(decoding: end.raw, as: UTF8.self))
        while worker.expandOnce() > 0 {}
        w.fake.deleteAnswer.withLock { $0 = .refused(status: 403, reason: "InvalidProviderToken") }
        XCTAssertEqual(w.finishOnceAfterBroadcasts(worker), 0, "not finished")
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)["status"]?.stringValue, "ending")
        w.fake.deleteAnswer.withLock { $0 = nil }
        _ = try w.env.db.system { c in try c.execute("UPDATE channels SET updated_at = now() WHERE id = $1", [ch]) }  // the 30 s postponement, passed
        XCTAssertEqual(worker.finishOnce(), 1)
        XCTAssertEqual(w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)["status"]?.stringValue, "ended")
        XCTAssertEqual(w.fake.deleted.withLock { $0 }.count, 1)
    }

    func testBroadcastOutcomesAndChannelEnd() throws {
        let w = try ChannelWorld.make()
        defer { w.env.tearDown() }
        let ch = try w.channel(), gone = try w.channel()
        let m18 = try w.member(osVersion: "18.0"), m17 = try w.member(osVersion: "17.0")
        let key = try w.sender([m18.startTargetId, m17.startTargetId, ch, gone])
        XCTAssertEqual(w.start(m18, channel: ch, as: key).status, 202)
        XCTAssertEqual(w.start(m17, channel: ch, as: key).status, 202)
        let worker = w.worker()
        // 200: ids stored, one quota unit used.
        let up = w.update(ch, ["eta": 1], revision: 0, as: key)
        let copId = try XCTUnwrap(up["channel_operation"]?["id"]?.stringValue)
        XCTAssertTrue(worker.broadcastOnce())
        let cop = w.env.call("GET", "/v1/remote-updates/channel-operations/\(copId)", as: w.tenant.master)
        XCTAssertEqual(cop["broadcast"]?["status"]?.stringValue, "accepted")
        XCTAssertNotNil(cop["broadcast"]?["apns_unique_id"]?.stringValue)
        XCTAssertEqual(w.fake.broadcasts.withLock { $0.last?.expiration }, 0, "storage policy none: apns-expiration 0")
        // 429 → retried later; 400 BadChannelId → failed and the channel ended (channel_invalid).
        w.fake.broadcastAnswer.withLock { $0 = .refused(status: 429, reason: "TooManyRequests", retryAfterSeconds: nil) }
        let g = w.update(gone, ["eta": 1], revision: 0, as: key)
        XCTAssertTrue(worker.broadcastOnce())
        let gop = try XCTUnwrap(g["channel_operation"]?["id"]?.stringValue)
        XCTAssertEqual(
            w.env.call("GET", "/v1/remote-updates/channel-operations/\(gop)", as: w.tenant.master)["broadcast"]?["status"]?.stringValue, "queued")
        _ = try w.env.db.system { c in try c.execute("UPDATE channel_operations SET broadcast_next_at = now() WHERE id = $1", [gop]) }
        w.fake.broadcastAnswer.withLock { $0 = .refused(status: 400, reason: "BadChannelId", retryAfterSeconds: nil) }
        XCTAssertTrue(worker.broadcastOnce())
        let failed = w.env.call("GET", "/v1/remote-updates/channel-operations/\(gop)", as: w.tenant.master)
        XCTAssertEqual(failed["status"]?.stringValue, "failed")
        let goneCh = w.env.call("GET", "/v1/remote-updates/channels/\(gone)", as: w.tenant.master)
        XCTAssertEqual(goneCh["status"]?.stringValue, "ended")
        XCTAssertEqual(goneCh["end_reason"]?.stringValue, "channel_invalid")
        w.fake.broadcastAnswer.withLock { $0 = nil }
        // End: fan-out members get an end operation, the broadcast carries the end, then the
        // APNs channel is deleted and the channel is ended.
        let end = w.env.call(
            "POST", "/v1/remote-updates/channels/\(ch)/end", ["idempotency_key": "end", "state": ["eta": 0], "expected_revision": 1],
            as: key.credential)
        XCTAssertEqual(end.status, 202, String(decoding: end.raw, as: UTF8.self))
        while worker.expandOnce() > 0 {}
        XCTAssertEqual(w.finishOnceAfterBroadcasts(worker), 1)
        let ended = w.env.call("GET", "/v1/remote-updates/channels/\(ch)", as: w.tenant.master)
        XCTAssertEqual(ended["status"]?.stringValue, "ended")
        XCTAssertEqual(w.fake.deleted.withLock { $0 }, [ended["apns_channel_id"]!.stringValue!])
        XCTAssertEqual(
            try w.count(
                "SELECT count(*) AS n FROM operations o JOIN targets t ON t.id = o.target_id WHERE t.channel_id = $1 AND o.kind = 'end'", [ch]), 1,
            "the fan-out member got its end")
        XCTAssertEqual(
            try w.count("SELECT count(*) AS n FROM targets WHERE channel_id = $1 AND delivery = 'broadcast' AND status = 'ended'", [ch]), 1)
        XCTAssertEqual(try w.count("SELECT count(*) AS n FROM events WHERE type = 'channel.ended' AND channel_id = $1", [ch]), 1)
    }
}

extension ChannelWorld {
    /// Sends every due broadcast, then runs the finaliser once; returns how many channels ended.
    func finishOnceAfterBroadcasts(_ worker: ChannelWorker) -> Int {
        while worker.broadcastOnce() {}
        return worker.finishOnce()
    }
}
