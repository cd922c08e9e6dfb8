import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics

/// The maintenance service of `liverelay serve` (docs/http-conventions.md, docs/templates.md, docs/configuration.md): runs the template-version GC,
/// the purge of expired idempotency records and the retention purge of terminal targets
/// every `interval` on its own thread, logging each version it removed and a summary, until
/// `stop()` (which waits for a pass in progress). The first pass runs one interval after start.
///
/// Interval: `LIVERELAY_GC_INTERVAL_SECONDS` (default 600, minimum 1).
///
/// Metrics (when given a registry; docs/operations.md "Metrics"):
/// `liverelay_maintenance_passes_total{result="ok|failed"}`,
/// `liverelay_gc_template_versions_removed_total`, `liverelay_gc_bytes_removed_total`,
/// `liverelay_idempotency_records_purged_total`, `liverelay_maintenance_last_pass_timestamp_seconds`
/// (Unix time in seconds of the last finished pass, 0 before the first) and
/// `liverelay_maintenance_last_pass_duration_seconds`.
final class MaintenanceService: @unchecked Sendable {  // mutable state only under `condition`
    let db: Database
    let log: Logger
    let interval: TimeInterval
    let now: @Sendable () -> Date
    /// `LIVERELAY_RETENTION_DAYS`: terminal targets and their operations are purged this many
    /// days after they ended (docs/security.md "Retention").
    let retentionDays: Int
    private let condition = NSCondition()
    private var stopping = false
    private var running = false
    private var thread: Thread?
    private let passes: Counter?
    private let removedVersions: Counter?
    private let removedBytes: Counter?
    private let purged: Counter?
    private let lastPass = LockedBox<(at: Double, duration: Double)>((0, 0))

    /// Default interval between GC passes, seconds.
    static let defaultIntervalSeconds: TimeInterval = 600

    init(
        db: Database, log: Logger, metrics: MetricsRegistry? = nil, interval: TimeInterval = MaintenanceService.defaultIntervalSeconds,
        retentionDays: Int = TenantLimits.defaultRetentionDays, now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.retentionDays = retentionDays
        self.db = db
        self.log = log
        self.interval = interval
        self.now = now
        passes = metrics?.counter(
            "liverelay_maintenance_passes_total", help: "Maintenance passes (GC + idempotency purge) by result",
            labels: ["result"])
        removedVersions = metrics?.counter(
            "liverelay_gc_template_versions_removed_total",
            help: "Template versions deleted by the GC", labels: [])
        removedBytes = metrics?.counter(
            "liverelay_gc_bytes_removed_total", help: "Declared bundle bytes of the deleted template versions",
            labels: [])
        purged = metrics?.counter("liverelay_idempotency_records_purged_total", help: "Expired idempotency records deleted", labels: [])
        let last = lastPass
        metrics?.gauge("liverelay_maintenance_last_pass_timestamp_seconds", help: "Unix time of the last finished maintenance pass (0: none yet)") {
            [([], last.get().at)]
        }
        metrics?.gauge("liverelay_maintenance_last_pass_duration_seconds", help: "Duration of the last finished maintenance pass") {
            [([], last.get().duration)]
        }
    }

    /// Starts the background thread.
    func start() {
        condition.lock()
        defer { condition.unlock() }
        guard thread == nil else { return }
        running = true
        let t = Thread { [self] in loop() }
        t.name = "liverelay-maintenance"
        thread = t
        t.start()
        log.info("maintenance started", ["gc_interval_seconds": .double(interval)])
    }

    /// Asks the thread to stop and waits until it has (a GC pass in progress finishes first).
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running && thread != nil { condition.wait() }
        condition.unlock()
    }

    private func loop() {
        while true {
            condition.lock()
            let deadline = Date().addingTimeInterval(interval)
            while !stopping && Date() < deadline { _ = condition.wait(until: deadline) }
            let stop = stopping
            condition.unlock()
            if stop { break }
            runOnce()
        }
        condition.lock()
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Deletes idempotency records past their retention (docs/http-conventions.md: sealed replayable
    /// credentials are purged after 24 h).
    func purgeIdempotencyRecords() {
        do {
            let n = try db.system { c in try IdempotencyStore.purgeExpired(c) }
            purged?.increment([], by: Double(n))
            if n > 0 { log.info("idempotency records purged", ["count": .int(Int64(n))]) }
        } catch {
            log.error("idempotency purge failed", ["error": .string("\(error)")])
        }
    }

    /// Purges terminal targets, their operations and old idempotency records past retention
    /// (docs/security.md "Retention"); logs what went. Returns the counts (nil on failure).
    @discardableResult
    func purgeRetention() -> PurgeCounts? {
        do {
            let n = try RetentionStore.purge(db, retentionDays: retentionDays)
            if n != PurgeCounts() {
                log.info(
                    "retention purge",
                    [
                        "targets": .int(Int64(n.targets)), "operations": .int(Int64(n.operations)),
                        "idempotency_records": .int(Int64(n.idempotencyRecords)),
                        "retention_days": .int(Int64(retentionDays))
                    ])
            }
            return n
        } catch {
            log.error("retention purge failed", ["error": .string("\(error)")])
            return nil
        }
    }

    /// Deletes events older than 30 days with their deliveries (docs/webhooks.md "Events").
    func purgeEvents(now: Date) {
        do {
            let n = try db.system { c in try EventStore.purgeExpired(c, now: now) }
            if n > 0 { log.info("events purged", ["count": .int(Int64(n))]) }
        } catch {
            log.error("event purge failed", ["error": .string("\(error)")])
        }
    }

    /// One GC pass: deletes every collectable template version, logs each and a summary.
    /// Returns what it removed.
    @discardableResult
    func runOnce() -> [CollectedVersion] {
        let clock = now()
        let started = Date()
        defer { lastPass.set((Date().timeIntervalSince1970, Date().timeIntervalSince(started))) }
        do {
            let removed = try RetentionStore.collect(db, now: clock, dryRun: false) { binding, error in
                log.warning("gc: binding skipped", ["binding": .string(binding), "error": .string("\(error)")])
            }
            for v in removed { log.info("gc: template version removed", GCCommand.json(v, dryRun: false).objectValue ?? [:]) }
            log.info("gc: pass finished", ["removed": .int(Int64(removed.count)), "bytes": .int(removed.reduce(0) { $0 + $1.bytes })])
            removedVersions?.increment([], by: Double(removed.count))
            removedBytes?.increment([], by: Double(removed.reduce(0) { $0 + $1.bytes }))
            purgeIdempotencyRecords()
            purgeRetention()
            passes?.increment(["ok"])
            purgeEvents(now: clock)
            return removed
        } catch {
            passes?.increment(["failed"])
            log.error("gc: pass failed", ["error": .string("\(error)")])
            return []
        }
    }
}
