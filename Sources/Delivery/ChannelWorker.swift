import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres
import Synchronization

/// Settings of the channel worker (docs/channels.md "Fan-out", "APNs wire").
public struct ChannelWorkerConfiguration: Sendable {
    /// Lease owner of claimed broadcasts (unique per process).
    public var workerId: String
    /// Members walked per fan-out transaction.
    public var fanoutBatchSize: Int
    /// Channels expanded per pass (round robin across tenants).
    public var fanoutChannelsPerPass: Int
    /// Threads sending broadcasts (each blocks on one request).
    public var broadcastThreads: Int
    /// Broadcast lease length in seconds.
    public var leaseSeconds: Double
    /// Longest sleep without a wake-up (seconds).
    public var pollSeconds: Double
    /// `apns-expiration` = now + this for a `most_recent` channel write without `expires_at`.
    public var defaultExpirationSeconds: Int
    public var retryPolicy: RetryPolicy
    public init(
        workerId: String = DispatcherConfiguration.defaultWorkerId(), fanoutBatchSize: Int = 500, fanoutChannelsPerPass: Int = 16,
        broadcastThreads: Int = 4, leaseSeconds: Double = 30, pollSeconds: Double = 1, defaultExpirationSeconds: Int = 3600,
        retryPolicy: RetryPolicy = .standard
    ) {
        self.workerId = workerId; self.fanoutBatchSize = max(1, fanoutBatchSize); self.fanoutChannelsPerPass = max(1, fanoutChannelsPerPass)
        self.broadcastThreads = max(1, broadcastThreads); self.leaseSeconds = leaseSeconds; self.pollSeconds = pollSeconds
        self.defaultExpirationSeconds = defaultExpirationSeconds; self.retryPolicy = retryPolicy
    }
}

/// The channel side of the dispatcher process (docs/channels.md): the **fan-out expander**
/// (walks each channel write's fan-out members in keyset order, in bounded batches, inserting
/// per-target operations that the `Dispatcher` claims fairly like any other), the
/// **broadcaster** (one APNs broadcast per channel write, in commit order per channel, with
/// backoff on `429`/`5xx`) and the **finaliser** (an ended channel's APNs channel is deleted).
/// Woken by `NOTIFY liverelay_channels` (channel writes) and by commits in this process; polls
/// every `pollSeconds` otherwise.
///
/// Threads: one expander, `broadcastThreads` broadcasters (each claims and sends one at a
/// time), one listener and one housekeeper. `@unchecked Sendable`: mutable state only under `cond`.
public final class ChannelWorker: @unchecked Sendable {
    public let configuration: ChannelWorkerConfiguration
    let db: Database
    let conninfo: String
    let sender: any BroadcastSending
    let manager: any ChannelManaging
    let log: Logger
    let broadcasts: Counter
    let fanoutOps: Counter
    let fanoutLag: Histogram
    private let backlog = LockedValue<(Double, Double)>((0, 0))

    private let cond = NSCondition()
    private var running = false
    private var wakeSeq = 0
    private var threads = 0
    private let exited = DispatchSemaphore(value: 0)
    private var rotation = 0
    /// Tie-break rotation of broadcast claims across tenants (`BroadcastStore.claim`).
    private let broadcastRotation = Atomic<Int>(0)

    /// - Parameters:
    ///   - sender: sends broadcasts (APNs broadcast host); `manager`: deletes ended channels' APNs channels.
    public init(
        db: Database, conninfo: String, sender: any BroadcastSending, manager: any ChannelManaging,
        configuration: ChannelWorkerConfiguration = ChannelWorkerConfiguration(), metrics: MetricsRegistry, log: Logger
    ) {
        self.db = db; self.conninfo = conninfo; self.sender = sender; self.manager = manager; self.configuration = configuration
        self.log = log.with(["component": "channels"])
        broadcasts = metrics.counter("liverelay_broadcasts_total", help: "APNs broadcast attempts by outcome", labels: ["outcome"])
        fanoutOps = metrics.counter("liverelay_fanout_operations_total", help: "Per-target operations inserted by the fan-out expander", labels: [])
        fanoutLag = metrics.histogram(
            "liverelay_fanout_lag_seconds", help: "Channel write commit to the end of its fan-out walk (seconds)",
            labels: [], buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300])
        let b = backlog
        metrics.gauge("liverelay_fanout_backlog", help: "Channel writes whose fan-out walk is not done") { [([], b.get().0)] }
        metrics.gauge("liverelay_fanout_oldest_seconds", help: "Age of the oldest channel write whose fan-out walk is not done") {
            [([], b.get().1)]
        }
    }

    // MARK: lifecycle

    /// Starts every thread. Idempotent.
    public func start() {
        cond.lock()
        guard !running else { cond.unlock(); return }
        running = true
        cond.unlock()
        db.addCommitObserver { [weak self] notes, _ in
            if notes.contains(where: { $0.channel == ChannelStore.channelsChannel }) { self?.wake() }
        }
        spawn("channels-expand") { self.expandLoop() }
        for i in 0..<configuration.broadcastThreads { spawn("channels-broadcast-\(i)") { self.broadcastLoop() } }
        spawn("channels-listen") { self.listenLoop() }
        spawn("channels-housekeeping") { self.housekeepingLoop() }
    }

    /// Stops every thread (each finishes the transaction or request it is in).
    public func stop(timeoutSeconds: Double = 10) {
        cond.lock()
        guard running else { cond.unlock(); return }
        running = false
        cond.broadcast()
        let n = threads
        cond.unlock()
        for _ in 0..<n { _ = exited.wait(timeout: .now() + timeoutSeconds) }
    }

    /// Asks every loop to look for work now.
    public func wake() { cond.lock(); wakeSeq &+= 1; cond.broadcast(); cond.unlock() }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        cond.lock(); threads += 1; cond.unlock()
        let t = Thread {
            body(); self.exited.signal()
        }
        t.name = name
        t.start()
    }

    private var isRunning: Bool { cond.lock(); defer { cond.unlock() }; return running }

    /// Sleeps until woken (a wake after `seen`) or `pollSeconds`; returns the new wake sequence.
    private func idle(_ seen: Int) -> Int {
        cond.lock()
        defer { cond.unlock() }
        if running && wakeSeq == seen { _ = cond.wait(until: Date().addingTimeInterval(configuration.pollSeconds)) }
        return wakeSeq
    }

    private func listenLoop() {
        PostgresConnection.listenLoop(
            conninfo: conninfo, channel: ChannelStore.channelsChannel, isStopping: { !isRunning }, connected: { wake() },
            received: { _ in wake() })
    }

    // MARK: fan-out

    /// One expander pass: a batch for each of up to `fanoutChannelsPerPass` channels with
    /// pending fan-out. Returns how many batches did work (tests call it directly).
    @discardableResult
    public func expandOnce() -> Int {
        rotation &+= 1
        let r = rotation
        var worked = 0
        do {
            let pending = try db.system { c in try FanoutStore.pending(c, limit: configuration.fanoutChannelsPerPass, rotation: r) }
            for p in pending {
                let day = QuotaStore.day(Date())
                let res = try db.system { c in
                    // Slots a dispatcher of this process lends (docs/delivery.md "Claims at fan-out");
                    // without one, no liveness probe per member either.
                    let reserve: ((Int) -> FanoutClaim?)? =
                        db.commitClaims.current == nil
                        ? nil : { [db] want in FanoutClaim.begin(c, db: db, tenantId: p.tenantId, want: want) }
                    return try FanoutStore.expandBatch(c, p, batchSize: configuration.fanoutBatchSize, day: day, reserve: reserve)
                }
                if res.skipped { continue }
                worked += 1
                if res.operations > 0 { fanoutOps.increment([], by: Double(res.operations)) }
                if res.done, let op = try db.system({ c in try ChannelStore.getOperation(c, tenantId: p.tenantId, id: p.id) }) {
                    fanoutLag.observe([], max(0, Date().timeIntervalSince(op.createdAt)))
                }
            }
        } catch {
            if isRunning { log.warning("fan-out pass failed", ["error": .string("\(error)")]) }
        }
        return worked
    }

    private func expandLoop() {
        var seen = -1
        while isRunning {
            if expandOnce() > 0 { continue }
            seen = idle(seen)
        }
    }

    // MARK: broadcasts

    /// Claims and sends at most one due broadcast; returns whether one was sent (tests call it directly).
    @discardableResult
    public func broadcastOnce() -> Bool {
        let claimed: [ClaimedBroadcast]
        do {
            claimed = try db.system { c in
                try BroadcastStore.claim(
                    c, worker: configuration.workerId, limit: 1, leaseSeconds: configuration.leaseSeconds, now: Date(),
                    rotation: broadcastRotation.add(1, ordering: .relaxed).newValue)
            }
        } catch {
            if isRunning { log.warning("broadcast claim failed", ["error": .string("\(error)")]) }
            return false
        }
        guard let b = claimed.first else { return false }
        let result: BroadcastResult
        do {
            result = sender.broadcast(try ChannelWorker.request(b, defaultExpirationSeconds: configuration.defaultExpirationSeconds, now: Date()))
        } catch {
            result = .refused(status: 413, reason: "PayloadTooLarge", retryAfterSeconds: nil)
        }
        let d = ChannelRules.decide(
            result, hasAlert: b.op.alert != nil, attempts: b.attempts, random: Double.random(in: 0..<1),
            policy: configuration.retryPolicy)
        broadcasts.increment([ChannelWorker.outcomeLabel(d)])
        do {
            let applied = try db.system { c in try BroadcastStore.apply(c, b, d, worker: configuration.workerId) }
            if !applied { log.warning("broadcast result discarded: its lease was taken over", ["channel_operation_id": .string(b.op.id)]) }
        } catch {
            log.error(
                "could not apply a broadcast result; its lease will expire",
                [
                    "channel_operation_id": .string(b.op.id),
                    "error": .string("\(error)")
                ])
        }
        if case .channelInvalid = d { log.warning("APNs no longer knows a channel; it ended", ["channel_id": .string(b.op.channelId)]) }
        wake()
        return true
    }

    /// The bounded `outcome` label of `liverelay_broadcasts_total`.
    static func outcomeLabel(_ d: BroadcastDecision) -> String {
        switch d {
        case .accepted: return "accepted"
        case .channelInvalid: return "channel_invalid"
        case .failed: return "failed"
        case .retry: return "retry"
        }
    }

    /// The broadcast request of `b` (docs/channels.md "APNs wire"): the update/end body with the
    /// channel's timestamp; `apns-expiration` 0 for storage policy `none`, else `expires_at` or
    /// now + `defaultExpirationSeconds`.
    /// - Throws: `DomainError` 413 when the body is over 4096 bytes.
    public static func request(_ b: ClaimedBroadcast, defaultExpirationSeconds: Int, now: Date) throws -> BroadcastRequest {
        let op = b.op
        let payload = APNsPayload(
            event: op.kind, timestamp: Date(timeIntervalSince1970: TimeInterval(b.timestamp)),
            contentState: op.state ?? .object([:]), staleDate: op.staleAt, relevanceScore: op.relevanceScore,
            alert: op.alert, dismissalDate: op.dismissAt)
        let expiration: Int64 =
            b.storagePolicy == "none"
            ? 0
            : Timestamp.epochSeconds(op.expiresAt ?? now.addingTimeInterval(TimeInterval(defaultExpirationSeconds)))
        return BroadcastRequest(
            tenantId: op.tenantId, appId: b.appId, environment: b.environment, apnsChannelId: b.apnsChannelId,
            body: try payload.checkedBytes(), priority: op.priority, expiration: expiration,
            requestId: UUID().uuidString.lowercased())
    }

    private func broadcastLoop() {
        var seen = -1
        while isRunning {
            if broadcastOnce() { continue }
            seen = idle(seen)
        }
    }

    // MARK: finaliser and housekeeping

    /// Deletes the APNs channel of every channel whose end is complete, then marks it `ended`
    /// (a refusal other than `403`/`429`/`5xx` counts as deleted: APNs no longer has it or
    /// never will; those and other transient failures are retried after 30 s). Returns how
    /// many channels ended.
    @discardableResult
    public func finishOnce() -> Int {
        var n = 0
        do {
            for e in try db.system({ c in try BroadcastStore.readyToFinish(c, limit: 20) }) {
                let r = manager.deleteChannel(tenantId: e.tenantId, appId: e.appId, environment: e.environment, apnsChannelId: e.apnsChannelId)
                var transient = false
                switch r {
                case .ok: break
                // 403: the credential was refused, the channel is still there: retry (a fixed
                // credential may come), never take it as deleted.
                case .refused(let s, _): transient = s == 429 || s >= 500 || s == 403
                // No answer, or the credential was removed after the channel was made: retry
                // later (a new credential may come); the channel stays `ending` meanwhile.
                case .unavailable, .noCredentials: transient = true
                }
                if transient {
                    try db.system { c in try BroadcastStore.postpone(c, e, after: 30) }
                    log.warning("could not delete an APNs channel; retrying later", ["channel_id": .string(e.id)])
                } else {
                    try db.system { c in try BroadcastStore.finish(c, e) }
                    n += 1
                }
            }
        } catch {
            if isRunning { log.warning("channel finaliser failed", ["error": .string("\(error)")]) }
        }
        return n
    }

    private func housekeepingLoop() {
        var last = Date.distantPast
        var seen = -1
        while isRunning {
            seen = idle(seen)
            _ = finishOnce()
            if Date().timeIntervalSince(last) >= 1 {
                last = Date()
                do {
                    if try db.system({ c in try BroadcastStore.rescue(c) }) > 0 { wake() }
                    let b = try db.system { c in try FanoutStore.backlog(c) }
                    backlog.set((Double(b.pending), b.oldestSeconds))
                } catch {
                    if isRunning { log.warning("channel housekeeping failed", ["error": .string("\(error)")]) }
                }
            }
        }
    }
}
