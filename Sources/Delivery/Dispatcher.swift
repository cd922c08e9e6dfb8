import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// Settings of one dispatcher (one worker identity).
public struct DispatcherConfiguration: Sendable {
    /// This worker's id, written to `operations.lease_owner`. Unique per process.
    public var workerId: String
    /// Threads calling `PushSender.send` (each send blocks its thread).
    public var senderThreads: Int
    /// Most operations claimed per claim transaction.
    public var claimBatchSize: Int
    /// Most candidates one tenant contributes to a claim (default `claimBatchSize`); tenants
    /// share each claim round robin either way (docs/delivery.md "Claims").
    public var claimPerTenant: Int
    /// How often the per-tenant queue gauges are sampled (seconds).
    public var tenantGaugeSeconds: Double
    /// Tenants with their own label in the per-tenant gauges; the rest are `other`.
    public var tenantGaugeTop: Int
    /// Most results applied per transaction.
    public var applyBatchSize: Int
    /// Claimed-but-unfinished operations this worker holds at most (defaults to 2 × threads).
    public var maxOutstanding: Int
    /// Lease length; a lease not renewed for this long is rescued by any worker.
    public var leaseSeconds: Double
    /// How often in-flight leases are renewed (well under `leaseSeconds`).
    public var heartbeatSeconds: Double
    /// Longest sleep without a NOTIFY before looking for due work again.
    public var pollSeconds: Double
    /// Rescue of expired leases, expiry of queued operations, queue depth.
    public var maintenanceSeconds: Double
    /// The token-pending safety net (the 0005 triggers un-park at once).
    public var unparkSweepSeconds: Double
    /// The 8 h lifetime sweep.
    public var lifetimeSweepSeconds: Double
    /// `apns-expiration` = now + this when a write had no `expires_at` (SPEC §8).
    public var defaultExpirationSeconds: Int
    public var retryPolicy: RetryPolicy
    /// Jitter source for `RetryPolicy.delay` (uniform 0..<1).
    public var random: @Sendable () -> Double
    /// Called just before each first send attempt with the commit → request lag (benchmarks).
    public var lagObserver: (@Sendable (Double) -> Void)?

    public init(workerId: String = DispatcherConfiguration.defaultWorkerId(), senderThreads: Int = 16, claimBatchSize: Int = 64,
                applyBatchSize: Int = 64, maxOutstanding: Int? = nil, leaseSeconds: Double = 30, heartbeatSeconds: Double? = nil,
                pollSeconds: Double = 1, maintenanceSeconds: Double = 1, unparkSweepSeconds: Double = 30, lifetimeSweepSeconds: Double = 60,
                defaultExpirationSeconds: Int = 3600, retryPolicy: RetryPolicy = .standard,
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }, lagObserver: (@Sendable (Double) -> Void)? = nil,
                claimPerTenant: Int? = nil, tenantGaugeSeconds: Double = 5, tenantGaugeTop: Int = 10) {
        self.workerId = workerId; self.senderThreads = max(1, senderThreads); self.claimBatchSize = max(1, claimBatchSize)
        self.claimPerTenant = max(1, claimPerTenant ?? claimBatchSize); self.tenantGaugeSeconds = tenantGaugeSeconds
        self.tenantGaugeTop = tenantGaugeTop
        self.applyBatchSize = max(1, applyBatchSize); self.maxOutstanding = max(1, maxOutstanding ?? 2 * max(1, senderThreads))
        self.leaseSeconds = leaseSeconds; self.heartbeatSeconds = heartbeatSeconds ?? leaseSeconds / 3
        self.pollSeconds = pollSeconds; self.maintenanceSeconds = maintenanceSeconds
        self.unparkSweepSeconds = unparkSweepSeconds; self.lifetimeSweepSeconds = lifetimeSweepSeconds
        self.defaultExpirationSeconds = defaultExpirationSeconds; self.retryPolicy = retryPolicy; self.random = random
        self.lagObserver = lagObserver
    }

    /// `<host>-<pid>-<random>`.
    public static func defaultWorkerId() -> String {
        let host = ProcessInfo.processInfo.hostName.prefix(40)
        return "\(host)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8).lowercased())"
    }
}

/// The dispatcher service (SPEC §5 ordering and unknown outcomes, §8 delivery, §9 workers):
/// claims due operations (`FOR UPDATE SKIP LOCKED`, at most one in flight per target, commit
/// order per target), sends them on `senderThreads` threads through a `PushSender`, applies
/// each result with `DispatchDecision` (batched transactions), renews its leases, rescues
/// other workers' expired leases, expires operations and runs the lifetime sweep. Any number
/// of dispatchers may share one database.
///
/// Threads: a claim loop (woken by `LISTEN liverelay_dispatch`, by finished operations, and
/// every `pollSeconds`), a listener, `senderThreads` senders, one applier and one housekeeper
/// (heartbeat, maintenance). All shared state sits behind one `NSCondition`.
public final class Dispatcher: @unchecked Sendable {  // mutable state only under `cond`
    public let configuration: DispatcherConfiguration
    let db: Database
    let conninfo: String
    let sender: any PushSender
    let log: Logger

    let operationsTotal: Counter
    let lag: Histogram
    private let queueDepthValue = LockedValue<Double>(0)
    private let inFlightValue = LockedValue<Double>(0)
    private let lastUnpark = LockedValue<Date>(.distantPast)
    private let lastTenantSample = LockedValue<Date>(.distantPast)
    private let tenantQueues = LockedValue<[TenantQueueGauges.Entry]>([])
    private var claimRotation = 0

    struct Job { let op: DispatchOperation }
    struct Completion { let op: DispatchOperation; let result: DispatchAttemptResult; let apnsId: String?; let token: String? }

    private let cond = NSCondition()
    private var running = false
    private var stopping = false
    private var wakeRequested = true
    private var jobs: [Job] = []
    private var completions: [Completion] = []
    /// Claimed and not yet applied, by operation id.
    private var outstanding: [String: (tenantId: String, id: String)] = [:]
    private var sending = 0
    private var threads: [Thread] = []
    private let exited = DispatchSemaphore(value: 0)
    private var threadCount = 0

    public init(db: Database, conninfo: String, sender: any PushSender, configuration: DispatcherConfiguration = DispatcherConfiguration(),
                metrics: MetricsRegistry, log: Logger) {
        self.db = db; self.conninfo = conninfo; self.sender = sender; self.configuration = configuration
        self.log = log.with(["component": "dispatcher", "worker": .string(configuration.workerId)])
        operationsTotal = metrics.counter("liverelay_operations_total", help: "Operation status transitions made by the dispatcher",
                                          labels: ["kind", "status"])
        lag = metrics.histogram("liverelay_dispatch_lag_seconds", help: "Commit of an operation to its first provider request",
                                labels: [], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])
        let depth = queueDepthValue, inflight = inFlightValue
        metrics.gauge("liverelay_queue_depth", help: "Queued operations (all tenants), sampled every maintenance interval") {
            [([], depth.get())]
        }
        metrics.gauge("liverelay_dispatch_in_flight", help: "Provider requests in flight in this process") { [([], inflight.get())] }
        let perTenant = tenantQueues
        metrics.gauge("liverelay_tenant_queue_depth", help: "Queued operations per tenant (deepest tenants by id, the rest as other)",
                      labels: ["tenant"]) { perTenant.get().map { ([$0.tenant], $0.depth) } }
        metrics.gauge("liverelay_tenant_oldest_due_seconds", help: "Age of each tenant's oldest due claimable operation, seconds",
                      labels: ["tenant"]) { perTenant.get().map { ([$0.tenant], $0.oldestDueSeconds) } }
    }

    // MARK: lifecycle

    /// Starts every thread. Idempotent.
    public func start() {
        cond.lock()
        guard !running else { cond.unlock(); return }
        running = true
        cond.unlock()
        spawn("dispatch-claim") { self.claimLoop() }
        spawn("dispatch-listen") { self.listenLoop() }
        for i in 0..<configuration.senderThreads { spawn("dispatch-send-\(i)") { self.senderLoop() } }
        spawn("dispatch-apply") { self.applyLoop() }
        spawn("dispatch-housekeeping") { self.housekeepingLoop() }
        log.info("dispatcher started", ["sender_threads": .int(Int64(configuration.senderThreads)),
                                        "lease_seconds": .double(configuration.leaseSeconds)])
    }

    /// Stops claiming, returns claimed-but-unsent operations to the queue, waits up to
    /// `timeoutSeconds` for in-flight sends to finish and their results to be applied, then
    /// stops every thread. Sends still blocked after that keep their leases, which expire and
    /// are rescued by another worker (outcome unknown). Call before closing the pool.
    public func stop(timeoutSeconds: Double = 10) {
        cond.lock()
        guard running, !stopping else { cond.unlock(); return }
        stopping = true
        let unsent = jobs.map { (tenantId: $0.op.tenantId, id: $0.op.id) }
        jobs.removeAll()
        for u in unsent { outstanding[u.id] = nil }
        cond.broadcast()
        cond.unlock()
        if !unsent.isEmpty {
            do { _ = try db.system { c in try DispatchStore.unclaim(c, worker: configuration.workerId, operations: unsent) } } catch {
                log.warning("could not return unsent operations to the queue; their leases will expire", ["error": .string("\(error)")])
            }
        }
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        cond.lock()
        while (!outstanding.isEmpty) && Date() < deadline { _ = cond.wait(until: min(deadline, Date().addingTimeInterval(0.05))) }
        running = false
        cond.broadcast()
        let n = threadCount
        cond.unlock()
        for _ in 0..<n { _ = exited.wait(timeout: .now() + max(0.5, deadline.timeIntervalSinceNow) + 2) }
        log.info("dispatcher stopped")
    }

    /// Asks the claim loop to look for work now (tests; NOTIFY does this in production).
    public func wake() {
        cond.lock(); wakeRequested = true; cond.broadcast(); cond.unlock()
    }

    /// Operations claimed and not yet finished by this dispatcher.
    public var outstandingCount: Int { cond.lock(); defer { cond.unlock() }; return outstanding.count }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        cond.lock(); threadCount += 1; cond.unlock()
        let t = Thread { [exited] in body(); exited.signal() }
        t.name = name
        t.stackSize = 1 << 20
        t.start()
    }

    private var isRunning: Bool { running && !stopping }

    // MARK: claim

    private func claimLoop() {
        var lastClaimFull = false
        while true {
            cond.lock()
            while true {
                if !isRunning { cond.unlock(); return }
                let free = configuration.maxOutstanding - outstanding.count
                let worthIt = outstanding.isEmpty || free >= min(configuration.claimBatchSize, max(1, configuration.maxOutstanding / 2))
                if free > 0 && worthIt && (wakeRequested || lastClaimFull) { break }
                if !cond.wait(until: Date().addingTimeInterval(configuration.pollSeconds)) {
                    wakeRequested = true  // poll fallback
                }
            }
            wakeRequested = false
            let limit = min(configuration.claimBatchSize, configuration.maxOutstanding - outstanding.count)
            claimRotation &+= 1
            let rotation = claimRotation
            cond.unlock()

            var claimed: [DispatchOperation] = []
            do {
                claimed = try db.system { c in
                    try DispatchStore.claim(c, worker: configuration.workerId, limit: limit, leaseSeconds: configuration.leaseSeconds, now: Date(),
                                            perTenant: configuration.claimPerTenant, rotation: rotation)
                }
            } catch {
                if isRunningLocked() { log.warning("claim failed", ["error": .string("\(error)")]) }
                Thread.sleep(forTimeInterval: 0.2)
            }
            lastClaimFull = claimed.count == limit && limit > 0
            guard !claimed.isEmpty else { continue }
            cond.lock()
            if stopping {
                cond.unlock()
                _ = try? db.system { c in try DispatchStore.unclaim(c, worker: configuration.workerId, operations: claimed.map { ($0.tenantId, $0.id) }) }
                return
            }
            for op in claimed {
                outstanding[op.id] = (op.tenantId, op.id)
                jobs.append(Job(op: op))
            }
            cond.broadcast()
            cond.unlock()
        }
    }

    private func isRunningLocked() -> Bool { cond.lock(); defer { cond.unlock() }; return isRunning }

    private func listenLoop() {
        var conn: PostgresConnection?
        while isRunningLocked() {
            do {
                if conn == nil {
                    let c = try PostgresConnection(conninfo)
                    try c.listen(OperationStore.dispatchChannel)
                    conn = c
                    wake()  // anything committed while we were not listening
                }
                if try !conn!.waitForNotifications(timeoutSeconds: 0.25).isEmpty { wake() }
            } catch {
                conn?.close()
                conn = nil
                if isRunningLocked() {
                    log.warning("dispatch listener lost its connection; retrying", ["error": .string("\(error)")])
                    Thread.sleep(forTimeInterval: 1)
                }
            }
        }
        conn?.close()
    }

    // MARK: send

    private func senderLoop() {
        while true {
            cond.lock()
            while jobs.isEmpty && running { cond.wait() }
            if jobs.isEmpty { cond.unlock(); return }
            let job = jobs.removeFirst()
            sending += 1
            inFlightValue.set(Double(sending))
            cond.unlock()

            let result: DispatchAttemptResult, apnsId: String?, token = job.op.deviceToken
            let now = Date()
            if let e = job.op.expiresAt, e <= now {
                result = .expired; apnsId = nil
            } else {
                do {
                    let push = try DispatchPush.build(job.op, now: now, defaultExpirationSeconds: configuration.defaultExpirationSeconds)
                    apnsId = push.apnsId
                    if job.op.attempts == 1 {
                        let l = max(0, Date().timeIntervalSince(job.op.createdAt))
                        lag.observe([], l)
                        configuration.lagObserver?(l)
                    }
                    result = DispatchPush.attemptResult(sender.send(push))
                } catch let e as DomainError {
                    result = .notSendable(code: e.code, message: e.message); apnsId = nil
                } catch {
                    result = .notSendable(code: "PUSH_BUILD_FAILED", message: "\(error)"); apnsId = nil
                }
            }
            cond.lock()
            sending -= 1
            inFlightValue.set(Double(sending))
            completions.append(Completion(op: job.op, result: result, apnsId: apnsId, token: token))
            cond.broadcast()
            cond.unlock()
        }
    }

    // MARK: apply

    private func applyLoop() {
        while true {
            cond.lock()
            while completions.isEmpty && running { cond.wait() }
            if completions.isEmpty { cond.unlock(); return }
            let batch = Array(completions.prefix(configuration.applyBatchSize))
            completions.removeFirst(batch.count)
            cond.unlock()

            let now = Date()
            let decided = batch.map { ($0, DispatchDecision.decide($0.op.facts, $0.result, now: now, random: configuration.random(),
                                                                   policy: configuration.retryPolicy)) }
            var applied: [Bool] = []
            do {
                applied = try db.system { c in try applyBatch(c, decided) }
            } catch {
                // One bad row must not hold the others back: apply one by one.
                log.warning("batched apply failed; applying one by one", ["error": .string("\(error)")])
                applied = decided.map { item in
                    do { return try db.system { c in try apply(c, item.0, item.1) } } catch {
                        log.error("could not apply a result; the lease will expire and be rescued",
                                  ["operation_id": .string(item.0.op.id), "error": .string("\(error)")])
                        return false
                    }
                }
            }
            for ((comp, d), ok) in zip(decided, applied) where ok {
                operationsTotal.increment([comp.op.kind.rawValue, d.operation.status.rawValue])
                if case .notSendable(let code, let message) = comp.result {
                    log.warning("push could not be built", ["operation_id": .string(comp.op.id), "code": .string(code), "message": .string(message)])
                }
            }
            cond.lock()
            for comp in batch { outstanding[comp.op.id] = nil }
            wakeRequested = true  // a finished operation may unblock the next one of its target
            cond.broadcast()
            cond.unlock()
        }
    }

    /// Applies a batch in the caller's transaction: plain acceptances in bulk
    /// (`DispatchStore.applyAccepted`), everything else one by one (`DispatchStore.apply`).
    private func applyBatch(_ c: PostgresConnection, _ decided: [(Completion, DispatchDecision)]) throws -> [Bool] {
        var bulk: [DispatchStore.Acceptance] = []
        for (comp, d) in decided {
            if case .accepted(let pid) = d.operation, d.target == .none, d.cancelQueued == nil, d.deadToken == nil {
                bulk.append(DispatchStore.Acceptance(op: comp.op, providerId: pid, apnsId: comp.apnsId))
            }
        }
        let bulkIds = Set(bulk.map(\.op.id))
        let done = try DispatchStore.applyAccepted(c, bulk, owner: configuration.workerId)
        return try decided.map { comp, d in
            if bulkIds.contains(comp.op.id) {
                if !done.contains(comp.op.id) {
                    log.warning("result discarded: the operation's lease was taken over", ["operation_id": .string(comp.op.id)])
                }
                return done.contains(comp.op.id)
            }
            return try apply(c, comp, d)
        }
    }

    private func apply(_ c: PostgresConnection, _ comp: Completion, _ d: DispatchDecision) throws -> Bool {
        let g: DispatchApplyGuard = .lease(owner: configuration.workerId, attempts: comp.op.attempts)
        let ok = try DispatchStore.apply(c, comp.op, d, guard: g, apnsId: comp.apnsId, usedToken: comp.token)
        if !ok {
            log.warning("result discarded: the operation's lease was taken over", ["operation_id": .string(comp.op.id)])
        }
        return ok
    }

    // MARK: housekeeping

    private func housekeepingLoop() {
        var lastHeartbeat = Date(), lastMaintenance = Date.distantPast, lastLifetime = Date.distantPast
        while true {
            cond.lock()
            if running { _ = cond.wait(until: Date().addingTimeInterval(min(0.25, configuration.maintenanceSeconds))) }
            let live = running
            let mine = Array(outstanding.values)
            cond.unlock()
            if !live { return }
            let now = Date()
            if now.timeIntervalSince(lastHeartbeat) >= configuration.heartbeatSeconds {
                lastHeartbeat = now
                do { _ = try db.system { c in try DispatchStore.heartbeat(c, worker: configuration.workerId, operations: mine, leaseSeconds: configuration.leaseSeconds) } }
                catch { log.warning("heartbeat failed", ["error": .string("\(error)")]) }
            }
            if now.timeIntervalSince(lastMaintenance) >= configuration.maintenanceSeconds {
                lastMaintenance = now
                maintenance()
            }
            if now.timeIntervalSince(lastLifetime) >= configuration.lifetimeSweepSeconds {
                lastLifetime = now
                do {
                    let ended = try db.system { c in try DispatchStore.endExpiredLifetimes(c) }
                    if !ended.isEmpty { log.info("lifetime sweep ended targets", ["count": .int(Int64(ended.count))]) }
                } catch { log.warning("lifetime sweep failed", ["error": .string("\(error)")]) }
            }
        }
    }

    /// One maintenance pass: rescue expired leases, expire queued operations, un-park
    /// token-pending work whose token arrived (every `unparkSweepSeconds`), sample the queue depth.
    public func maintenance() {
        do {
            let rescued = try db.system { c -> [(DispatchOperation, DispatchDecision)] in
                let now = Date()
                var out: [(DispatchOperation, DispatchDecision)] = []
                for op in try DispatchStore.expiredLeases(c, limit: 200) {
                    let d = DispatchDecision.decide(op.facts, .leaseExpired, now: now, random: configuration.random(), policy: configuration.retryPolicy)
                    if try DispatchStore.apply(c, op, d, guard: .expiredLease, apnsId: nil, usedToken: op.deviceToken) { out.append((op, d)) }
                }
                return out
            }
            for (op, d) in rescued {
                operationsTotal.increment([op.kind.rawValue, d.operation.status.rawValue])
                log.info("rescued an expired lease", ["operation_id": .string(op.id), "status": .string(d.operation.status.rawValue)])
            }
            if !rescued.isEmpty { wake() }
            let expired = try db.system { c -> [(DispatchOperation, DispatchDecision)] in
                let now = Date()
                var out: [(DispatchOperation, DispatchDecision)] = []
                for op in try DispatchStore.expiredQueued(c, limit: 200) {
                    let d = DispatchDecision.decide(op.facts, .expired, now: now, random: 0, policy: configuration.retryPolicy)
                    if try DispatchStore.apply(c, op, d, guard: .queued, apnsId: nil, usedToken: nil) { out.append((op, d)) }
                }
                return out
            }
            for (op, d) in expired { operationsTotal.increment([op.kind.rawValue, d.operation.status.rawValue]) }
            if !expired.isEmpty { wake() }
            if Date().timeIntervalSince(lastUnpark.get()) >= configuration.unparkSweepSeconds {
                lastUnpark.set(Date())
                if try db.system({ c in try DispatchStore.unparkTokenPending(c) }) > 0 { wake() }
            }
            if Date().timeIntervalSince(lastTenantSample.get()) >= configuration.tenantGaugeSeconds {
                lastTenantSample.set(Date())
                let queues = try db.system { c in try DispatchStore.tenantQueues(c) }
                queueDepthValue.set(Double(queues.reduce(0) { $0 + $1.depth }))
                tenantQueues.set(TenantQueueGauges.fold(queues.map {
                    TenantQueueGauges.Entry(tenant: $0.tenantId, depth: Double($0.depth), oldestDueSeconds: $0.oldestDueSeconds)
                }, top: configuration.tenantGaugeTop))
            }
        } catch {
            if isRunningLocked() { log.warning("maintenance failed", ["error": .string("\(error)")]) }
        }
    }
}

/// A value behind a lock (gauges sampled from other threads).
final class LockedValue<T: Sendable>: @unchecked Sendable {  // all access under `lock`
    private var value: T
    private let lock = NSLock()
    init(_ v: T) { value = v }
    func set(_ v: T) { lock.lock(); value = v; lock.unlock() }
    func get() -> T { lock.lock(); defer { lock.unlock() }; return value }
}
