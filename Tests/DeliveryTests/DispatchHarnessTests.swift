import Foundation
import XCTest
import Crypto
import Delivery
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Locking
import LiveRelayTestSupport

/// A fresh PostgreSQL database per test case (migrated), plus helpers that make tenants,
/// installations, start targets, targets and operations through the Store functions exactly as
/// the write path does (LifecycleHandlers), and a scripted fake `PushSender`.
/// Needs `LIVERELAY_TEST_DATABASE_URL` (deploy/local/test); throws `FixtureFailure` without it.
final class DispatchHarness: @unchecked Sendable {
    let database: TestDatabase
    var conninfo: String { database.conninfo }
    let pool: PostgresPool
    let db: Database
    let logs = Shared<[String]>([])
    let metrics = MetricsRegistry()
    /// operation id → target id, for the fake sender's per-target bookkeeping.
    let targetOfOperation = Shared<[String: String]>([:])
    var dispatchers: [Dispatcher] = []

    static func make() throws -> DispatchHarness { try DispatchHarness() }

    private init() throws {
        database = try TestDatabase(prefix: "lr_dispatch")
        pool = PostgresPool(conninfo: database.conninfo, maxConnections: 16, acquireTimeoutSeconds: 10)
        db = Database(pool: pool)
    }

    func tearDown() {
        for d in dispatchers { d.stop(timeoutSeconds: 5) }
        pool.close()
        database.drop()
    }

    var logger: Logger {
        let l = logs
        return Logger(minimum: .debug, sink: { line in l.m.withLock { $0.append(line) } })
    }

    /// Fast settings for tests: short poll, lease and backoff.
    static func testConfiguration(worker: String, threads: Int = 4, lease: Double = 30) -> DispatcherConfiguration {
        DispatcherConfiguration(
            workerId: worker, senderThreads: threads, claimBatchSize: 16, applyBatchSize: 16, leaseSeconds: lease,
            pollSeconds: 0.2, maintenanceSeconds: 0.2, lifetimeSweepSeconds: 0.5, defaultExpirationSeconds: 3600,
            retryPolicy: RetryPolicy(base: 0.1, factor: 2, cap: 0.4), random: { 0.5 }, tenantGaugeSeconds: 0.2)
    }

    @discardableResult
    func dispatcher(_ sender: any PushSender, worker: String = "worker-a", threads: Int = 4, lease: Double = 30, start: Bool = true) -> Dispatcher {
        let d = Dispatcher(
            db: db, conninfo: conninfo, sender: sender,
            configuration: Self.testConfiguration(worker: worker, threads: threads, lease: lease), metrics: metrics, log: logger)
        dispatchers.append(d)
        if start { d.start() }
        return d
    }

    // MARK: fixtures

    func tenant(quota: Int64 = 1000) throws -> String {
        let id = Identifier.make(.tenant)
        try db.system { c in
            try c.execute("INSERT INTO tenants (tenant_id, name, daily_push_quota) VALUES ($1, 'Acme', $2)", [id, quota])
            try c.execute("INSERT INTO publishable_keys (tenant_id, id, secret_hash) VALUES ($1, 'pk_test', 'x')", [id])
        }
        return id
    }

    func installation(_ tenant: String, platform: String = "ios", fcmToken: String? = nil) throws -> String {
        let id = Identifier.make(.installation)
        _ = try db.tenant(tenant) { c in
            _ = try InstallationStore.insert(
                c, tenantId: tenant, id: id, publishableKeyId: "pk_test", appId: "com.example.app",
                platform: platform, environment: "sandbox", installId: UUID().uuidString, fcmToken: fcmToken)
            try c.execute("INSERT INTO bindings (tenant_id, installation_id, id) VALUES ($1, $2, 'bnd_widget')", [tenant, id])
            try c.execute(
                """
                INSERT INTO template_versions (tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest,
                                               bundle_bytes, bundle_modules, bundle_files)
                VALUES ($1, $2, 'bnd_widget', 'tv_test', 'delivery', 'DeliveryAttributes', 'sha256:00', 10, 1, 1)
                """, [tenant, id])
        }
        return id
    }

    func startTarget(_ tenant: String, installation: String, token: String?) throws -> String {
        let id = Identifier.make(.startTarget)
        _ = try db.tenant(tenant) { c in
            try c.execute(
                """
                INSERT INTO start_targets (tenant_id, id, installation_id, binding_id, activity_type, current_template_version, push_to_start_token, status)
                VALUES ($1, $2, $3, 'bnd_widget', 'delivery', 'tv_test', $4, 'ready')
                """, [tenant, id, installation, token])
        }
        return id
    }

    func reserveQuota(_ c: PostgresConnection, _ tenant: String) throws -> String {
        let day = QuotaStore.day(Date())
        try QuotaStore.reserve(c, tenantId: tenant, day: day)
        return day
    }

    /// A running activity (as after a local start + token registration), revision 1.
    func target(
        _ tenant: String, installation: String, token: String?, platform: String = "ios",
        state: JSONValue = ["eta": 10]
    ) throws -> String {
        let id = Identifier.make(.target)
        try db.tenant(tenant) { c in
            _ = try TargetStore.insert(
                c, tenantId: tenant,
                TargetStore.New(
                    id: id, installationId: installation, startTargetId: nil, createdByKeyId: nil, origin: "local", activityType: "delivery",
                    templateVersion: "tv_test", businessKey: nil, businessGeneration: nil, status: platform == "android" ? .ready : .reserved,
                    state: state, staleAt: nil, relevanceScore: nil, tokenStatus: platform == "android" ? "registered" : "pending"))
            if let token { _ = try TargetStore.setPushToken(c, tenantId: tenant, id: id, token: token) }
        }
        return id
    }

    /// A remote start as `LifecycleHandlers.start` commits it. Returns (target, operation).
    func remoteStart(
        _ tenant: String, startTarget: String, platform: String = "ios", state: JSONValue = ["eta": 1],
        alert: PushAlert = PushAlert(title: "Order", body: "On its way"), expiresAt: Date? = nil, businessKey: String = "delivery:42"
    ) throws -> (String, String) {
        let targetId = Identifier.make(.target), opId = Identifier.make(.operation)
        try db.tenant(tenant) { c in
            guard let st = try TargetStore.startTargetForStart(c, tenantId: tenant, id: startTarget) else { throw FixtureFailure("no start target") }
            let day = try reserveQuota(c, tenant)
            _ = try TargetStore.insert(
                c, tenantId: tenant,
                TargetStore.New(
                    id: targetId, installationId: st.installationId, startTargetId: startTarget, createdByKeyId: nil, origin: "remote",
                    activityType: st.activityType, templateVersion: st.currentTemplateVersion, businessKey: businessKey, businessGeneration: "1",
                    status: .starting, state: state, staleAt: nil, relevanceScore: nil, tokenStatus: platform == "android" ? "registered" : "pending")
            )
            let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: targetId)
            _ = try OperationStore.insert(
                c, tenantId: tenant,
                OperationStore.New(
                    id: opId, targetId: targetId, seq: seq, kind: .start, revision: 1, state: state, alert: alert,
                    options: WriteOptions(expiresAt: expiresAt), consumesQuota: true, quotaDay: day, createdByKeyId: nil, idempotencyKey: opId))
        }
        targetOfOperation.m.withLock { $0[opId] = targetId }
        return (targetId, opId)
    }

    /// An update as `LifecycleHandlers.update` commits it (supersedes queued state-only updates).
    @discardableResult
    func update(
        _ tenant: String, target: String, state: JSONValue, alert: PushAlert? = nil, expiresAt: Date? = nil, id: String? = nil
    ) throws -> String {
        let opId = id ?? Identifier.make(.operation)
        try db.tenant(tenant) { c in try writeUpdate(c, tenant, target: target, state: state, alert: alert, expiresAt: expiresAt, id: opId) }
        targetOfOperation.m.withLock { $0[opId] = target }
        return opId
    }

    /// The statements of `update` inside the caller's transaction `c` (operation id `id`).
    func writeUpdate(
        _ c: PostgresConnection, _ tenant: String, target: String, state: JSONValue, alert: PushAlert? = nil, expiresAt: Date? = nil,
        id opId: String
    ) throws {
        targetOfOperation.m.withLock { $0[opId] = target }
        let t = try TargetStore.get(c, tenantId: tenant, id: target, forUpdate: true)!
        let day = try reserveQuota(c, tenant)
        let queued = try OperationStore.queued(c, tenantId: tenant, targetId: target)
        let victims = WriteRules.superseded(
            by: .update, hasState: true,
            queued: queued.map {
                QueuedOperation(id: $0.id, kind: $0.kind, hasState: $0.hasState, hasAlert: $0.hasAlert)
            })
        // One round trip for the target's new state and sequence, the operation, the supersede
        // and, when a dispatcher on `db` lends a slot, the write path's claim at commit
        // (docs/delivery.md "Claims at commit"), as `LifecycleHandlers.commitQueued` runs them;
        // the claimed operation is handed over after COMMIT.
        let seq = t.opSeq + 1
        let claim = CommitClaim.begin(c, db: db)
        // The head is refreshed by this write (migration 0040); the claim's prelude rides along.
        var writes = [WritePath.headByWriter(operationId: opId, with: claim?.settings(operationId: opId) ?? [])]
        writes.append(
            WritePath.applyState(
                tenantId: tenant, id: target, revision: t.revision + 1, state: state, sourceVersion: nil,
                staleAt: nil, relevanceScore: nil, status: nil))
        writes.append(
            OperationStore.insertStatement(
                tenantId: tenant,
                OperationStore.New(
                    id: opId, targetId: target, seq: seq, kind: .update, revision: t.revision + 1, state: state, alert: alert,
                    options: WriteOptions(expiresAt: expiresAt), consumesQuota: true, quotaDay: day, createdByKeyId: nil, idempotencyKey: opId)))
        if !victims.isEmpty { writes.append(WritePath.supersede(tenantId: tenant, targetId: target, ids: victims, by: opId)) }
        if claim == nil { writes.append(WritePath.refreshHead(tenantId: tenant, targetId: target)) }  // else the claim settles it
        if let claim { writes.append(claim.claim(tenantId: tenant, operationId: opId)) }
        let results = try c.pipeline(writes).get()
        for id in victims { try c.notify(OperationStore.eventsChannel, payload: id) }
        if let claim {
            let before = try claim.read(results[results.count - 1], tenantId: tenant, targetId: target)
            if !before.isEmpty { _ = try c.pipeline(before).get() }
        }
        if claim?.claimedAny != true { try c.notify(OperationStore.dispatchChannel, payload: tenant + ":" + opId) }
    }

    /// An end with the statements of the stores, one by one, so the dispatch heads are kept by
    /// the triggers alone (as every writer but the write path keeps them); `state: nil` is the
    /// stateless cleanup.
    @discardableResult
    func end(_ tenant: String, target: String, state: JSONValue? = nil, dismissAt: Date? = nil) throws -> String {
        let opId = Identifier.make(.operation)
        try db.tenant(tenant) { c in
            let t = try TargetStore.get(c, tenantId: tenant, id: target, forUpdate: true)!
            var day: String?
            var revision = t.revision
            if let state {
                day = try reserveQuota(c, tenant)
                revision += 1
                try TargetStore.applyState(
                    c, tenantId: tenant, id: target, revision: revision, state: state, sourceVersion: nil,
                    staleAt: nil, relevanceScore: nil, status: nil)
            }
            let queued = try OperationStore.queued(c, tenantId: tenant, targetId: target)
            let victims = WriteRules.superseded(
                by: .end, hasState: state != nil,
                queued: queued.map {
                    QueuedOperation(id: $0.id, kind: $0.kind, hasState: $0.hasState, hasAlert: $0.hasAlert)
                })
            let seq = try TargetStore.nextSeq(c, tenantId: tenant, id: target)
            _ = try OperationStore.insert(
                c, tenantId: tenant,
                OperationStore.New(
                    id: opId, targetId: target, seq: seq, kind: .end, revision: revision, state: state, alert: nil,
                    options: WriteOptions(staleAt: t.staleAt, relevanceScore: t.relevanceScore, expiresAt: nil), dismissAt: dismissAt,
                    consumesQuota: state != nil, quotaDay: day, createdByKeyId: nil, idempotencyKey: opId))
            try OperationStore.supersede(c, tenantId: tenant, ids: victims, by: opId)
            try TargetStore.setStatus(c, tenantId: tenant, id: target, status: .ending)
        }
        targetOfOperation.m.withLock { $0[opId] = target }
        return opId
    }

    // MARK: reads

    func operation(_ tenant: String, _ id: String) throws -> OperationRecord {
        try db.tenant(tenant) { c in try OperationStore.get(c, tenantId: tenant, id: id)! }
    }

    func targetRecord(_ tenant: String, _ id: String) throws -> TargetRecord {
        try db.tenant(tenant) { c in try TargetStore.get(c, tenantId: tenant, id: id)! }
    }

    /// The operation `dispatch_heads` names for `target` of `tenant` (nil: the target has no
    /// claimable head).
    func headOperation(_ tenant: String, _ target: String) throws -> String? {
        try db.system { c in
            try c.query("SELECT operation_id FROM dispatch_heads WHERE tenant_id = $1 AND target_id = $2", [tenant, target]).first?.string(
                "operation_id")
        }
    }

    func row(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> PostgresRow {
        try db.system { c in try c.query(sql, params)[0] }
    }

    func quota(_ tenant: String) throws -> (reserved: Int64, used: Int64) {
        try db.tenant(tenant) { c in try QuotaStore.usage(c, tenantId: tenant, day: QuotaStore.day(Date())) }
    }

    /// Waits until the operation reaches `status` (fails the test after `seconds`).
    @discardableResult
    func waitFor(
        _ tenant: String, _ op: String, _ status: OperationStatus, within seconds: Double = 10,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> OperationRecord {
        let deadline = Date().addingTimeInterval(seconds)
        var last: OperationRecord?
        while Date() < deadline {
            last = try operation(tenant, op)
            if last?.status == status { return last! }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("operation \(op) is \(last?.status.rawValue ?? "?"), expected \(status.rawValue)", file: file, line: line)
        return last!
    }
}

/// A scripted `PushSender`: per-operation result scripts (default: accepted), an optional gate
/// that holds chosen sends, a call log, and per-target in-flight bookkeeping.
final class FakeSender: PushSender, @unchecked Sendable {  // state under `lock`
    struct Call {
        let push: OutgoingPush
        let targetId: String
        let body: JSONValue
        let at: Date
        /// `aps.timestamp` (iOS) or `data.timestamp` (Android).
        var timestamp: Int64 {
            if let t = body["aps"]?["timestamp"], case .int(let v) = t { return v }
            if let s = body["message"]?["data"]?["timestamp"]?.stringValue, let v = Int64(s) { return v }
            return -1
        }
        var event: String? { body["aps"]?["event"]?.stringValue ?? body["message"]?["data"]?["event"]?.stringValue }
    }

    private let lock = NSCondition()
    private var scripts: [String: [PushResult]] = [:]
    private var held: Set<String> = []
    private var inFlightPerTarget: [String: Int] = [:]
    private(set) var maxInFlightPerTargetSeen = 0
    private var log: [Call] = []
    let targetOf: @Sendable (String) -> String
    let delay: Double

    init(delay: Double = 0, targetOf: @escaping @Sendable (String) -> String) {
        self.delay = delay; self.targetOf = targetOf
    }

    /// The next sends of `op` answer these results, in order (then: accepted).
    func script(_ op: String, _ results: [PushResult]) { lock.lock(); scripts[op, default: []] += results; lock.unlock() }
    /// Holds sends of `op` until `release(op)`.
    func hold(_ op: String) { lock.lock(); held.insert(op); lock.unlock() }
    func release(_ op: String) { lock.lock(); held.remove(op); lock.broadcast(); lock.unlock() }

    var calls: [Call] { lock.lock(); defer { lock.unlock() }; return log }
    var maxInFlightPerTarget: Int { lock.lock(); defer { lock.unlock() }; return maxInFlightPerTargetSeen }
    func calls(for op: String) -> [Call] { calls.filter { $0.push.operationId == op } }
    func isHolding(_ op: String) -> Bool {
        lock.lock(); defer { lock.unlock() }; return log.contains { $0.push.operationId == op } && held.contains(op)
    }

    func send(_ push: OutgoingPush) -> PushResult {
        let target = targetOf(push.operationId)
        let body = (try? JSONValue.parse(push.apnsBody ?? push.fcmBody ?? [])) ?? .null
        lock.lock()
        log.append(Call(push: push, targetId: target, body: body, at: Date()))
        inFlightPerTarget[target, default: 0] += 1
        maxInFlightPerTargetSeen = max(maxInFlightPerTargetSeen, inFlightPerTarget[target]!)
        while held.contains(push.operationId) { lock.wait() }
        var result: PushResult = .outcome(.accepted(providerId: nil))
        if var s = scripts[push.operationId], !s.isEmpty { result = s.removeFirst(); scripts[push.operationId] = s }
        lock.unlock()
        if delay > 0 { Thread.sleep(forTimeInterval: Double.random(in: 0...delay)) }
        lock.lock()
        inFlightPerTarget[target, default: 1] -= 1
        lock.unlock()
        return result
    }
}

extension DispatchHarness {
    /// `count` ready iOS targets named `tgt_<prefix>…`, one queued state-only update each (as the
    /// write path leaves them; the first `queued` of them when given). `analyze`: refresh the
    /// planner's statistics of `operations`, `targets` and `dispatch_heads` afterwards (false
    /// keeps them stale, as after a burst).
    func loadQueue(tenant t: String, installation inst: String, prefix: String, count: Int, queued: Int? = nil, analyze: Bool = true) throws {
        try db.tenant(t) { c in
            // Set-up, not the measured path: 1,000,000 targets and their target.ready events in
            // one statement take longer than the product's 30 s statement timeout.
            try c.execute("SET LOCAL statement_timeout = 0")
            let day = QuotaStore.day(Date())
            try c.execute(
                """
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status, op_seq)
                SELECT $1, 'tgt_' || $4 || lpad(g::text, 8, '0'), $2, 'local', 'delivery', 'tv_test', 'ready', 2,
                       jsonb_build_object('eta', g % 60, 'driver', 'Ana', 'stop', g), lpad(to_hex(g), 64, '0'), 'registered', 1
                  FROM generate_series(1, $3) g
                """, [t, inst, count, prefix])
            try c.execute(
                """
                INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, state, priority, consumes_quota, quota_day)
                SELECT $1, 'op_' || $4 || lpad(g::text, 8, '0'), 'tgt_' || $4 || lpad(g::text, 8, '0'), 1, 'update', 'queued', 2, true,
                       jsonb_build_object('eta', g % 60, 'driver', 'Ana', 'stop', g), 10, true, $3::date
                  FROM generate_series(1, $2) g
                """, [t, queued ?? count, day, prefix])
            if analyze { try c.execute("ANALYZE operations"); try c.execute("ANALYZE targets"); try c.execute("ANALYZE dispatch_heads") }
        }
    }

    /// One tenant, installation and target (update token `token`) with one queued update, a
    /// started dispatcher (`testConfiguration`) on a `FakeSender` that holds that update's send,
    /// returned once the send is held in flight.
    func heldUpdate(token: String) throws -> (tenant: String, installation: String, target: String, op: String, sender: FakeSender) {
        let t = try tenant(), inst = try installation(t)
        let tgt = try target(t, installation: inst, token: token)
        let op = try update(t, target: tgt, state: ["eta": 0])
        let fake = fakeSender()
        fake.hold(op)
        dispatcher(fake)
        eventually("the first push in flight") { fake.isHolding(op) }
        return (t, inst, tgt, op, fake)
    }

    func fakeSender(delay: Double = 0) -> FakeSender {
        let map = targetOfOperation
        return FakeSender(delay: delay) { op in map.m.withLock { $0[op] ?? "?" } }
    }
}

/// A `Locked` value under a name (`m`), shared by closures and other objects.
final class Shared<T: Sendable>: Sendable {
    let m: Locked<T>
    init(_ v: T) { m = Locked(v) }
}

/// A test class whose every test gets its own `DispatchHarness` (`h`, made in `setUpWithError`,
/// torn down in `tearDown`).
class DispatchTestCase: XCTestCase {
    var h: DispatchHarness!
    override func setUpWithError() throws { h = try DispatchHarness.make() }
    override func tearDown() { h?.tearDown() }
}
