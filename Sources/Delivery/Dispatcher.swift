import Crypto
import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Locking

/// The dispatcher service (docs/delivery.md; docs/write-semantics.md ordering and unknown outcomes, §8
/// delivery, §9 workers): claims due operations fairly (`DispatchStore.claim`: one head per
/// target, shared round robin across tenants, `FOR UPDATE SKIP LOCKED`), hands their pushes to
/// the `PushSender` without waiting for the provider, applies the results in batches with
/// `DispatchDecision`, renews its leases, rescues other workers' expired leases, expires
/// operations and runs the lifetime sweep. Any number of dispatchers may share one database.
///
/// Threads (River's producer / executor / completer split): a claim loop (woken by `LISTEN
/// liverelay_dispatch`, by `noteCommitted` from writes in this process, by finished operations,
/// and every `pollSeconds`), a listener, `senderThreads` submitters (build the push, `submit`),
/// `applierThreads` appliers, one heartbeat thread and one housekeeper (maintenance). An event-driven sender
/// completes on its connection threads; completions queue for the appliers, which take them in
/// batches (a second applier only while the first is busy; batches with target effects one at a time).
/// No thread waits per push. State is split over three locks that are never held together:
/// `cond` (lifecycle, outstanding, wake-ups), `jobsCond` (claimed, not yet submitted),
/// `applyCond` (completed, not yet applied). Claims at commit live in `Dispatcher+CommitClaim.swift`,
/// heartbeats and maintenance in `Dispatcher+Housekeeping.swift`, returns to the queue and
/// re-checks of parked operations in `Dispatcher+Requeue.swift`, tenant shares of the
/// outstanding slots in `Dispatcher+Shares.swift`, the appliers in `Dispatcher+Apply.swift`
/// (state they share is internal, touched only under the lock named here).
public final class Dispatcher: CommitClaimTaker, @unchecked Sendable {  // mutable state only under its lock (see above)
    public let configuration: DispatcherConfiguration
    let db: Database
    let conninfo: String
    let sender: any PushSender
    let log: Logger
    /// Claimed-but-unfinished operations held at most (see `DispatcherConfiguration.maxOutstanding`).
    public let maxOutstanding: Int

    let operationsTotal, priorityDowngrades, claimedAtCommitTotal, claimedAtFanoutTotal: Counter
    let lag, claimSeconds, claimBatch, applyBatch: Histogram
    let queueDepthValue = LockedValue<Double>(0)
    private let inFlight = InFlightCounter()
    let unparkPacer: LockedValue<SweepPacer>
    let lastStatistics = LockedValue<Date>(.distantPast)
    let tenantSamplePacer: LockedValue<SweepPacer>
    let tenantQueues = LockedValue<[TenantQueueGauges.Entry]>([])
    let commitHints = CommitHints()
    let counters = DispatcherCounters()

    struct Job { let op: DispatchOperation }
    /// One finished attempt, as the applier gets it. `apnsId`: the attempt's `apns-id`;
    /// `token`: the token the push went to.
    struct Completion {
        let op: DispatchOperation; let result: DispatchAttemptResult; let apnsId: String?; let token: String?
        /// When its apply first failed (monotonic seconds, `ProcessInfo.systemUptime`); nil until then.
        var applyFailedSince: Double? = nil
    }

    /// Held by the fair claim loop and the named-claim thread from computing the tenants'
    /// room (`tenantRoom`) until what they claimed is held (`hand`), so the two never claim
    /// against the same room at once: each would otherwise give a tenant its whole room, and a
    /// tenant whose requests hang could hold more than its share (DispatchFairnessTests). Taken
    /// before `cond`, never while holding it.
    let claimGate = NSLock()

    // `cond`
    let cond = NSCondition()
    var running = false
    var stopping = false
    var wakeRequested = true
    /// Claimed and not yet applied, by operation id. Change it only through `hold`/`release`
    /// (Dispatcher+Shares.swift), which keep `heldByTenant` in step.
    var outstanding: [String: (tenantId: String, id: String)] = [:]
    /// How many of `outstanding` each tenant holds (tenants holding none are absent).
    var heldByTenant: [String: Int] = [:]
    /// Tenants whose last claim was cut by their room: a slot one of them gets back wakes the
    /// claim loop (a claim cut by a tenant's room does not count as full).
    var capped: Set<String> = []
    private var claimRotation = 0
    /// Operations named by commits / NOTIFYs, not yet tried by the named-claim thread.
    private var named: [(tenantId: String, id: String)] = []
    /// Outstanding slots lent to writes claiming at commit, not yet taken or released.
    var commitReserved = 0
    /// Slots lent to fan-out batches, by tenant (part of `commitReserved`; `tenantRoom` counts
    /// them as held).
    var fanoutReserved: [String: Int] = [:]
    private let exited = DispatchSemaphore(value: 0)
    private var threadCount = 0
    // `jobsCond`
    private let jobsCond = NSCondition()
    private var jobs: [Job] = []
    private var jobsHead = 0
    private var submittersStop = false
    // `applyCond`
    let applyCond = NSCondition()
    var completions: [Completion] = []
    /// When (`ProcessInfo.systemUptime`, seconds) the oldest waiting completion arrived (`applyGatherSeconds`).
    var oldestCompletionAt = 0.0
    var applierStop = false
    /// Appliers inside an apply transaction now, and the results they hold.
    var appliersBusy = 0
    var resultsInApply = 0
    /// Held while a batch is applied whose effects reach beyond its own targets
    /// (`DispatchStore.reachesBeyondTarget`: a start target, an installation and all its targets,
    /// channel member counts), so two of them at once could lock in opposite orders. Other
    /// batches, accepted remote starts and ends included, never wait for it.
    let effectsLock = NSLock()

    public init(
        db: Database, conninfo: String, sender: any PushSender, configuration: DispatcherConfiguration = DispatcherConfiguration(),
        metrics: MetricsRegistry, log: Logger
    ) {
        self.db = db; self.conninfo = conninfo; self.sender = sender; self.configuration = configuration
        self.maxOutstanding =
            sender.isEventDriven && !configuration.maxOutstandingIsExplicit
            ? configuration.eventDrivenMaxOutstanding : configuration.maxOutstanding
        self.log = log.with(["component": "dispatcher", "worker": .string(configuration.workerId)])
        unparkPacer = LockedValue(SweepPacer(intervalSeconds: configuration.unparkSweepSeconds, maxShare: configuration.scanMaxShare))
        tenantSamplePacer = LockedValue(SweepPacer(intervalSeconds: configuration.tenantGaugeSeconds, maxShare: configuration.scanMaxShare))
        operationsTotal = metrics.counter(
            "liverelay_operations_total", help: "Operation status transitions made by the dispatcher",
            labels: ["kind", "status"])
        lag = metrics.histogram(
            "liverelay_dispatch_lag_seconds",
            help: "Commit of an operation to its first provider request written (seconds)",
            labels: [], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])
        claimSeconds = metrics.histogram(
            "liverelay_dispatch_claim_seconds", help: "Duration of one claim transaction (seconds)",
            labels: [], buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1])
        claimBatch = metrics.histogram(
            "liverelay_dispatch_claim_batch_size", help: "Operations claimed per claim transaction",
            labels: [], buckets: [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        applyBatch = metrics.histogram(
            "liverelay_dispatch_apply_batch_size", help: "Results applied per apply transaction",
            labels: [], buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        priorityDowngrades = metrics.counter(
            "liverelay_priority_downgrades_total",
            help: "State-only iOS updates sent at priority 5 instead of 10 because the target's priority-10 budget was spent (one per send attempt)",
            labels: [])
        priorityDowngrades.increment([], by: 0)  // exposed as 0 from the start
        claimedAtCommitTotal = metrics.counter(
            "liverelay_dispatch_claimed_at_commit_total",
            help: "Operations claimed by the write that queued them and handed to this dispatcher after COMMIT (docs/delivery.md, Claims at commit)",
            labels: [])
        claimedAtCommitTotal.increment([], by: 0)
        claimedAtFanoutTotal = metrics.counter(
            "liverelay_dispatch_claimed_at_fanout_total",
            help:
                "Operations the fan-out expander inserted in flight and handed to this dispatcher after COMMIT (docs/delivery.md, Claims at fan-out)",
            labels: [])
        claimedAtFanoutTotal.increment([], by: 0)
        let depth = queueDepthValue, inflight = inFlight
        metrics.gauge("liverelay_queue_depth", help: "Queued operations (all tenants), sampled every maintenance interval") {
            [([], depth.get())]
        }
        metrics.gauge("liverelay_dispatch_in_flight", help: "Provider requests in flight in this process") {
            [([], Double(inflight.now))]
        }
        metrics.gauge("liverelay_dispatch_in_flight_max", help: "High-water mark of provider requests in flight in this process") {
            [([], Double(inflight.highWater))]
        }
        let perTenant = tenantQueues
        metrics.gauge(
            "liverelay_tenant_queue_depth", help: "Queued operations per tenant (deepest tenants by fingerprint, the rest as other)",
            labels: ["tenant"]
        ) { perTenant.get().map { ([Self.tenantLabel($0.tenant)], $0.depth) } }
        metrics.gauge(
            "liverelay_tenant_oldest_due_seconds", help: "How long each tenant's longest-waiting target with due claimable work has waited, seconds",
            labels: ["tenant"]
        ) { perTenant.get().map { ([Self.tenantLabel($0.tenant)], $0.oldestDueSeconds) } }
    }

    /// The `tenant` label of the per-tenant gauges: `tfp_` and the first 16 hex digits of the
    /// SHA-256 of the tenant id (`TenantQueueGauges.otherLabel` unchanged). `GET /metrics`
    /// needs no credential and must not show tenant data (docs/operations.md "Metrics"), so
    /// the series never carry a tenant id; an operator who knows one finds its series with
    /// `printf %s <tenant id> | sha256sum | cut -c1-16`.
    public static func tenantLabel(_ tenant: String) -> String {
        tenant == TenantQueueGauges.otherLabel ? tenant : "tfp_" + String(Digest.sha256Hex(Array(tenant.utf8)).prefix(16))
    }

    // MARK: lifecycle

    /// Starts every thread and subscribes to this process's commits of `db`. Idempotent.
    public func start() {
        cond.lock()
        guard !running else { cond.unlock(); return }
        running = true
        cond.unlock()
        db.addCommitObserver { [weak self] notifications, at in self?.committed(notifications, at: at) }
        if configuration.claimAtCommit { db.commitClaims.register(self) }
        spawn("dispatch-claim") { self.claimLoop() }
        if configuration.claimNamedOperations { spawn("dispatch-claim-named") { self.namedClaimLoop() } }
        spawn("dispatch-listen") { self.listenLoop() }
        for i in 0..<configuration.senderThreads { spawn("dispatch-send-\(i)") { self.senderLoop() } }
        for i in 0..<max(1, configuration.applierThreads) { spawn("dispatch-apply-\(i)") { self.applyLoop() } }
        spawn("dispatch-housekeeping") { self.housekeepingLoop() }
        spawn("dispatch-heartbeat") { self.heartbeatLoop() }
        log.info(
            "dispatcher started",
            [
                "sender_threads": .int(Int64(configuration.senderThreads)),
                "max_outstanding": .int(Int64(maxOutstanding)),
                "lease_seconds": .double(configuration.leaseSeconds)
            ])
    }

    /// Stops claiming, returns claimed-but-unsent operations to the queue, waits up to
    /// `timeoutSeconds` for in-flight sends to finish and their results to be applied, then
    /// stops every thread. Sends still unanswered after that keep their leases, which expire and
    /// are rescued by another worker (outcome unknown). Call before closing the pool.
    public func stop(timeoutSeconds: Double = 10) {
        cond.lock()
        guard running, !stopping else { cond.unlock(); return }
        stopping = true
        cond.broadcast()
        cond.unlock()
        db.commitClaims.withdraw(self)
        jobsCond.lock()
        let unsent = jobs[jobsHead...].map(\.op)
        jobs.removeAll(); jobsHead = 0
        jobsCond.unlock()
        cond.lock()
        for u in unsent { release(u.id) }
        cond.unlock()
        returnToQueue(unsent, why: "unsent when the dispatcher stopped")
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        cond.lock()
        // Lent slots too: a write that reserved one before `withdraw` may still commit and hand over.
        while (!outstanding.isEmpty || commitReserved > 0) && Date() < deadline {
            _ = cond.wait(until: min(deadline, Date().addingTimeInterval(0.05)))
        }
        running = false
        cond.broadcast()
        let n = threadCount
        cond.unlock()
        jobsCond.lock(); submittersStop = true; jobsCond.broadcast(); jobsCond.unlock()
        applyCond.lock(); applierStop = true; applyCond.broadcast(); applyCond.unlock()
        for _ in 0..<n { _ = exited.wait(timeout: .now() + max(0.5, deadline.timeIntervalSinceNow) + 2) }
        log.info("dispatcher stopped")
    }

    /// Asks the claim loop to look for work now (tests; NOTIFY and `noteCommitted` do this in production).
    public func wake() {
        cond.lock(); wakeRequested = true; cond.broadcast(); cond.unlock()
    }

    /// The in-process wake-up (docs/delivery.md "Wake-ups"): `operationIds` were committed at
    /// `at` by a writer sharing this process. Records the commit time of each (the start of its
    /// commit → request lag) and wakes the claim loop at once, without the NOTIFY round trip.
    public func noteCommitted(operationIds: [String], at: Date = Date()) {
        commitHints.record(operationIds, at: at)
        wake()
    }

    /// Commit observer of `db`: the write path's NOTIFY on `liverelay_dispatch` carries
    /// `<tenant>` or `<tenant>:<operation>` (OperationStore.insert): a named operation goes to the
    /// named claim (its commit time recorded for the lag), a bare tenant wakes the fair claim loop.
    private func committed(_ notifications: [(channel: String, payload: String)], at: Date) {
        var pairs: [(tenantId: String, id: String)] = []
        var general = false
        for n in notifications where n.channel == OperationStore.dispatchChannel {
            if let pair = Self.namedOperation(n.payload) { pairs.append(pair) } else { general = true }
        }
        guard general || !pairs.isEmpty else { return }
        commitHints.record(pairs.map(\.id), at: at)
        wake(named: pairs, general: general)
    }

    /// `<tenant>:<operation>` → the pair; nil for a bare `<tenant>` (or anything else).
    static func namedOperation(_ payload: String) -> (tenantId: String, id: String)? {
        guard let colon = payload.firstIndex(of: ":") else { return nil }
        let tenant = String(payload[..<colon]), id = String(payload[payload.index(after: colon)...])
        return tenant.isEmpty || id.isEmpty ? nil : (tenant, id)
    }

    /// Hands named operations to the named-claim thread (when on; else, like `general`, wakes
    /// the fair claim loop).
    private func wake(named pairs: [(tenantId: String, id: String)], general: Bool) {
        cond.lock()
        if configuration.claimNamedOperations && !pairs.isEmpty {
            named.append(contentsOf: pairs)
        } else if !pairs.isEmpty {
            wakeRequested = true
        }
        if general { wakeRequested = true }
        cond.broadcast()
        cond.unlock()
    }

    /// Operations claimed and not yet finished by this dispatcher.
    public var outstandingCount: Int { cond.lock(); defer { cond.unlock() }; return outstanding.count }

    /// Provider requests in flight now, and the most seen at once since start.
    public var streamsInFlight: (now: Int, max: Int) { (inFlight.now, inFlight.highWater) }

    /// Totals since start (benchmarks): claim and apply transactions, their summed duration
    /// (seconds) and the operations they claimed / results they applied.
    public var stats: DispatcherStats { counters.snapshot() }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        cond.lock(); threadCount += 1; cond.unlock()
        let t = Thread { [exited] in
            body(); exited.signal()
        }
        t.name = name
        t.stackSize = 1 << 20
        t.start()
    }

    var isRunning: Bool { running && !stopping }

    // MARK: claim

    private func claimLoop() {
        var lastClaimFull = false
        while true {
            cond.lock()
            while true {
                if !isRunning { cond.unlock(); return }
                let free = maxOutstanding - outstanding.count - commitReserved
                let worthIt = outstanding.isEmpty || free >= min(configuration.claimBatchSize, max(1, maxOutstanding / 2))
                if free > 0 && worthIt && (wakeRequested || lastClaimFull) { break }
                if !cond.wait(until: Date().addingTimeInterval(configuration.pollSeconds)) {
                    wakeRequested = true  // poll fallback
                }
            }
            wakeRequested = false
            guard enterClaimGate() else { return }
            let limit = min(configuration.claimBatchSize, maxOutstanding - outstanding.count - commitReserved)
            guard limit > 0 else {  // the named claim took the free slots meanwhile: keep the wake-up
                wakeRequested = true
                cond.unlock()
                claimGate.unlock()
                continue
            }
            claimRotation &+= 1
            let rotation = claimRotation
            let room = tenantRoom()
            cond.unlock()

            var claimed: [DispatchOperation] = []
            var examined = 0
            var parked: [(tenantId: String, id: String)] = []
            var failed = false
            do {
                claimed = try timedClaim(named: false) { c in
                    let r = try DispatchStore.claimExamining(
                        c, worker: configuration.workerId, limit: limit, leaseSeconds: configuration.leaseSeconds, now: Date(),
                        perTenant: configuration.claimPerTenant, rotation: rotation, room: room.held, otherRoom: room.other)
                    examined = r.examined
                    parked = r.parked
                    return r.claimed
                }
            } catch {
                if isRunningLocked() { log.warning("claim failed", ["error": .string("\(error)")]) }
                failed = true
            }
            recheckParked(parked)
            // Cut by its limit (parked and finished-target heads count: they used places too), so
            // claim again as soon as slots free, whether or not an apply finds a due head.
            lastClaimFull = max(claimed.count, examined) >= limit && limit > 0
            if !hand(claimed) {
                claimGate.unlock()
                return
            }
            cond.lock()
            noteRoomCuts(claimed, room: room)
            cond.unlock()
            claimGate.unlock()
            if failed { Thread.sleep(forTimeInterval: 0.2) }  // outside the gate: named claims go on
        }
    }

    /// Runs one claim transaction and records its duration and size (metrics, `stats`).
    private func timedClaim(named: Bool, _ body: (PostgresConnection) throws -> [DispatchOperation]) throws -> [DispatchOperation] {
        let began = Date()
        // What the transaction claimed, for the case where its COMMIT's outcome is unknown.
        let taken = Locked<[DispatchOperation]>([])
        // The priority-budget decision is taken as the push is claimed (docs/priority-budget.md).
        let claimed: [DispatchOperation]
        do {
            claimed = try db.system(settings: configuration.claimSettings) { c in
                let ops = try DispatchStore.decidePriorities(c, try body(c), now: configuration.clock())
                taken.withLock { $0 = ops }
                return ops
            }
        } catch let e as PostgresError where e.kind == .connection {
            // The connection broke: maybe after COMMIT was sent and the claim did commit. Its
            // operations would then sit `sending` under this worker's lease, never sent, until
            // the lease expired (and an alert or a start would end `unknown`). Put back what
            // it took; nothing happens when it rolled back (docs/delivery.md "Claims").
            returnToQueueLater(taken.withLock { $0 }, why: "a claim whose COMMIT's outcome is unknown")
            throw e
        }
        let seconds = Date().timeIntervalSince(began)
        if seconds > configuration.leaseSeconds / 2 && !claimed.isEmpty {
            // The claim (or its COMMIT) took more than half a lease: the lease may run out before
            // the next heartbeat renews it, and a rescue could then requeue or give up on a push
            // that is in flight. Not handed over: back to the queue, fenced by the claim's stamp
            // (the same rule as claims at commit, docs/delivery.md "Claims").
            log.warning(
                "claim took more than half a lease; its operations go back to the queue",
                ["seconds": .double(seconds), "count": .int(Int64(claimed.count))])
            if !returnToQueue(claimed, why: "a claim that took more than half a lease", logFailure: false) {
                returnToQueueLater(claimed, why: "a claim that took more than half a lease")
            }
            counters.returnedSlowClaim(claimed.count)
            return []
        }
        for op in claimed where op.budgetDecision?.downgraded == true { priorityDowngrades.increment([]) }
        claimSeconds.observe([], seconds)
        claimBatch.observe([], Double(claimed.count))
        counters.claimed(claimed.count, seconds: seconds, named: named)
        return claimed
    }

    /// Records `claimed` as outstanding and queues it for the submitters, freeing `lent` slots
    /// lent to claims at commit in the same step (so the claim loops never see a free slot in
    /// between); `fanoutTenant`: the slots were lent to that tenant's fan-out batch, whose
    /// reservation ends in the same step (a tenant capped by it is woken). When stopping,
    /// returns it to the queue instead and answers false.
    func hand(_ claimed: [DispatchOperation], lent: Int = 0, fanoutTenant: String? = nil) -> Bool {
        guard !claimed.isEmpty || lent > 0 else { return true }
        cond.lock()
        commitReserved -= lent
        if let t = fanoutTenant {  // lent to a fan-out batch: no longer counted in the tenant's room
            let left = (fanoutReserved[t] ?? 0) - lent
            fanoutReserved[t] = left > 0 ? left : nil
            if capped.remove(t) != nil { wakeRequested = true }
        }
        if stopping {
            cond.broadcast()
            cond.unlock()
            returnToQueue(claimed, why: "claimed while stopping")
            return false
        }
        for op in claimed { hold(op) }
        if lent > 0 { cond.broadcast() }
        cond.unlock()
        guard !claimed.isEmpty else { return true }
        jobsCond.lock()
        jobs.append(contentsOf: claimed.map { Job(op: $0) })
        jobsCond.broadcast()
        jobsCond.unlock()
        return true
    }

    /// The named-claim thread (docs/delivery.md "Wake-ups"): claims exactly the operations that
    /// commits in this process or NOTIFYs named, as soon as they are named, in one statement for
    /// everything named meanwhile (`DispatchStore.claim(ids:)`), within the free outstanding
    /// slots. Names it could not claim (not the head, not due, locked, no free slot) wake the
    /// fair claim loop, which finds them in `dispatch_heads` when they become claimable.
    private func namedClaimLoop() {
        while true {
            cond.lock()
            while isRunning && (named.isEmpty || outstanding.count + commitReserved >= maxOutstanding) {
                if !named.isEmpty { named.removeAll(); wakeRequested = true; cond.broadcast() }  // no slot: the fair loop takes them later
                cond.wait()
            }
            if !isRunning { cond.unlock(); return }
            guard enterClaimGate() else { return }
            let free = maxOutstanding - outstanding.count - commitReserved
            // Names beyond their tenant's room wait for the fair claim (which takes them when
            // the room comes back).
            let room = tenantRoom()
            var taken: [String: Int] = [:]
            var heldBack = false
            var batch = named.filter { n in
                guard outstanding[n.id] == nil else { return false }
                let r = room.held[n.tenantId] ?? room.other
                taken[n.tenantId, default: 0] += 1
                if taken[n.tenantId]! > r { heldBack = true }
                return taken[n.tenantId]! <= r
            }
            if heldBack { wakeRequested = true }
            named.removeAll()
            if batch.count > max(0, free) { batch.removeLast(batch.count - max(0, free)); wakeRequested = true }
            cond.unlock()
            guard !batch.isEmpty else {
                claimGate.unlock()
                continue
            }

            var claimed: [DispatchOperation] = []
            var parked: [(tenantId: String, id: String)] = []
            do {
                claimed = try timedClaim(named: true) { c in
                    let r = try DispatchStore.claimNamed(
                        c, worker: configuration.workerId, ids: batch, limit: batch.count,
                        leaseSeconds: configuration.leaseSeconds, now: Date())
                    parked = r.parked
                    return r.claimed
                }
            } catch {
                if isRunningLocked() { log.warning("named claim failed", ["error": .string("\(error)")]) }
            }
            recheckParked(parked)
            let handed = hand(claimed)
            claimGate.unlock()
            if claimed.count < batch.count { wake() }  // the rest: the fair loop decides
            if !handed { return }
        }
    }

    /// Called holding `cond`: takes `claimGate` (released `cond` first, the gate's lock order),
    /// then `cond` again. Returns true holding both; false, holding neither, when the dispatcher
    /// stopped meanwhile (then no claim may begin).
    private func enterClaimGate() -> Bool {
        cond.unlock()
        claimGate.lock()
        cond.lock()
        guard isRunning else {
            cond.unlock()
            claimGate.unlock()
            return false
        }
        return true
    }

    func isRunningLocked() -> Bool { cond.lock(); defer { cond.unlock() }; return isRunning }

    /// NOTIFYs on `liverelay_dispatch`: operations they name go to the named claim unless this
    /// process's commit observer already named them (same process) or they are claimed here.
    private func heard(_ notifications: [PostgresNotification]) {
        var pairs: [(tenantId: String, id: String)] = []
        var general = false
        for n in notifications where n.channel == OperationStore.dispatchChannel {
            if let pair = Self.namedOperation(n.payload) {
                if !commitHints.contains(pair.id) { pairs.append(pair) }
            } else {
                general = true
            }
        }
        if pairs.isEmpty && !general { return }
        cond.lock()
        pairs.removeAll { outstanding[$0.id] != nil }
        cond.unlock()
        if !pairs.isEmpty || general { wake(named: pairs, general: general) }
    }

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
                let got = try conn!.waitForNotifications(timeoutSeconds: 0.25)
                if !got.isEmpty { heard(got) }
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

    /// Takes claimed jobs, builds each push and submits it; an event-driven sender returns at
    /// once, a blocking one holds this thread until the result.
    private func senderLoop() {
        while true {
            jobsCond.lock()
            while jobsHead == jobs.count && !submittersStop { jobsCond.wait() }
            if jobsHead == jobs.count { jobsCond.unlock(); return }
            let job = jobs[jobsHead]
            jobsHead += 1
            if jobsHead == jobs.count { jobs.removeAll(keepingCapacity: true); jobsHead = 0 }
            jobsCond.unlock()
            submit(job)
        }
    }

    private func submit(_ job: Job) {
        let token = job.op.deviceToken
        let now = Date()
        if let e = job.op.expiresAt, e <= now { return complete(Completion(op: job.op, result: .expired, apnsId: nil, token: token)) }
        let push: OutgoingPush
        do {
            push = try DispatchPush.build(job.op, now: now, defaultExpirationSeconds: configuration.defaultExpirationSeconds)
        } catch let e as DomainError {
            return complete(Completion(op: job.op, result: .notSendable(code: e.code, message: e.message), apnsId: nil, token: token))
        } catch {
            return complete(Completion(op: job.op, result: .notSendable(code: "PUSH_BUILD_FAILED", message: "\(error)"), apnsId: nil, token: token))
        }
        inFlight.increment()
        var written: (@Sendable () -> Void)?
        if job.op.attempts == 1 {
            let committedAt = commitHints.take(job.op.id) ?? job.op.createdAt
            let lag = self.lag, observer = configuration.lagObserver
            written = {
                let l = max(0, Date().timeIntervalSince(committedAt))
                lag.observe([], l)
                observer?(l)
            }
        }
        let apnsId = push.apnsId
        sender.submit(push, written: written) { [self] result in
            inFlight.decrement()
            complete(Completion(op: job.op, result: DispatchPush.attemptResult(result), apnsId: apnsId, token: token))
        }
    }
}
