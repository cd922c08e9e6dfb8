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
    /// Threads that build pushes and hand them to `PushSender.submit`. An event-driven sender
    /// (`ProviderSender`) returns at once, so a few suffice; a blocking sender (`submit`'s
    /// default) holds one thread per push in flight.
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
    /// Transaction settings of every claim (default `DispatchStore.claimSettings`; empty keeps
    /// the server's own planner settings).
    public var claimSettings: [(String, String)] = DispatchStore.claimSettings
    /// Apply transactions that may run at once (docs/delivery.md "Applying results"), default
    /// 2; values below 1 mean 1. One applier is always ready for the next completion; a further
    /// one starts only while every other is busy and at least half a batch waits (half of
    /// `applyBatchSize` or of what `maxOutstanding` leaves beside the results being applied), so
    /// batches stay large. Batches without target effects touch disjoint rows (no operation is
    /// in two batches, at most one operation per target is in flight, quota counters are
    /// sharded by backend), and neither do batches whose effects stay on their own targets (accepted
    /// starts, ends); batches whose effects reach a start target, an installation or a channel's
    /// counts (`DispatchStore.reachesBeyondTarget`) are applied one at a time.
    public var applierThreads: Int = 2
    /// Seconds a small batch of results (under half a batch) waits for more before the free
    /// applier applies it (docs/delivery.md "Applying results"): default 0.002. Results
    /// trickling in one at a time (claims at commit) otherwise cost an apply transaction each;
    /// 0 applies at once.
    public var applyGatherSeconds: Double = 0.002
    /// Claimed-but-unfinished operations this worker holds at most: with an event-driven sender
    /// the bound on streams in flight (default `eventDrivenMaxOutstanding`), with a blocking one
    /// 2 × threads unless given.
    public var maxOutstanding: Int
    /// `maxOutstanding` for an event-driven sender when none was given.
    public var eventDrivenMaxOutstanding: Int
    /// True when `maxOutstanding` was given explicitly.
    public var maxOutstandingIsExplicit: Bool
    /// Lease length; a lease not renewed for this long is rescued by any worker.
    public var leaseSeconds: Double
    /// How often in-flight leases are renewed (well under `leaseSeconds`).
    public var heartbeatSeconds: Double
    /// Longest sleep without a NOTIFY before looking for due work again.
    public var pollSeconds: Double
    /// Rescue of expired leases, expiry of queued operations, queue depth.
    public var maintenanceSeconds: Double
    /// Seconds between checks of the hot tables' planner statistics (`PlannerStatistics.refresh`,
    /// docs/delivery.md "Planner statistics").
    public var statisticsSweepSeconds: Double = 1
    /// Seconds between runs of the token-pending safety net (the 0005 triggers un-park at once).
    public var unparkSweepSeconds: Double
    /// Most of one core's time (a fraction, default 0.02) that each scan over every queued
    /// operation (the token-pending safety net, the per-tenant queue gauges) may take: a run that
    /// took d seconds waits at least d / this before the next (`SweepPacer`, docs/delivery.md
    /// "Maintenance cost"), beyond `unparkSweepSeconds` / `tenantGaugeSeconds`.
    public var scanMaxShare: Double = 0.02
    /// The 8 h lifetime sweep.
    public var lifetimeSweepSeconds: Double
    /// `apns-expiration` = now + this when a write had no `expires_at` (docs/providers.md).
    public var defaultExpirationSeconds: Int
    public var retryPolicy: RetryPolicy
    /// Jitter source for `RetryPolicy.delay` (uniform 0..<1).
    public var random: @Sendable () -> Double
    /// Called once per operation when its first attempt's request was written, with the commit
    /// → request lag in seconds (benchmarks).
    public var lagObserver: (@Sendable (Double) -> Void)?
    /// Claim the operations a commit in this process (or a NOTIFY from another) names at once,
    /// by id, on their own thread (docs/delivery.md "Wake-ups"); false: every wake-up runs the
    /// general fair claim.
    public var claimNamedOperations = true
    /// Lend outstanding slots (at most half of `maxOutstanding`) to writes in this process on
    /// the same `Database`, which claim the operation they queue inside their own transaction
    /// and hand it over after COMMIT (docs/delivery.md "Claims at commit"); false: such writes
    /// queue and the named or fair claim sends them.
    public var claimAtCommit = true
    /// The clock of priority-budget decisions and of the send times they count
    /// (docs/priority-budget.md); tests inject one to slide the 60-minute window.
    public var clock: @Sendable () -> Date = Date.init

    public init(
        workerId: String = DispatcherConfiguration.defaultWorkerId(), senderThreads: Int = 16, claimBatchSize: Int = 512,
        applyBatchSize: Int = 512, maxOutstanding: Int? = nil, leaseSeconds: Double = 30, heartbeatSeconds: Double? = nil,
        pollSeconds: Double = 1, maintenanceSeconds: Double = 1, unparkSweepSeconds: Double = 30, lifetimeSweepSeconds: Double = 60,
        defaultExpirationSeconds: Int = 3600, retryPolicy: RetryPolicy = .standard,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }, lagObserver: (@Sendable (Double) -> Void)? = nil,
        claimPerTenant: Int? = nil, tenantGaugeSeconds: Double = 5, tenantGaugeTop: Int = 10, eventDrivenMaxOutstanding: Int = 4096
    ) {
        self.workerId = workerId; self.senderThreads = max(1, senderThreads); self.claimBatchSize = max(1, claimBatchSize)
        self.claimPerTenant = max(1, claimPerTenant ?? claimBatchSize); self.tenantGaugeSeconds = tenantGaugeSeconds
        self.tenantGaugeTop = tenantGaugeTop
        self.applyBatchSize = max(1, applyBatchSize); self.maxOutstanding = max(1, maxOutstanding ?? 2 * max(1, senderThreads))
        self.maxOutstandingIsExplicit = maxOutstanding != nil; self.eventDrivenMaxOutstanding = max(1, eventDrivenMaxOutstanding)
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
