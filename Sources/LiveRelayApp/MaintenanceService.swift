import Foundation
import JSON
import LiveRelayStore
import Logging

/// The maintenance service of `liverelay serve` (SPEC §3, §6, §9): runs the template-version GC
/// and the purge of expired idempotency records
/// every `interval` on its own thread, logging each version it removed and a summary, until
/// `stop()` (which waits for a pass in progress). The first pass runs one interval after start.
///
/// Interval: `LIVERELAY_GC_INTERVAL_SECONDS` (default 600, minimum 1).
final class MaintenanceService: @unchecked Sendable {  // mutable state only under `condition`
    let db: Database
    let log: Logger
    let interval: TimeInterval
    let now: @Sendable () -> Date
    private let condition = NSCondition()
    private var stopping = false
    private var running = false
    private var thread: Thread?

    /// Default interval between GC passes, seconds.
    static let defaultIntervalSeconds: TimeInterval = 600

    /// The interval from `LIVERELAY_GC_INTERVAL_SECONDS`, else the default.
    static func intervalFromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) -> TimeInterval {
        if let s = env["LIVERELAY_GC_INTERVAL_SECONDS"], let v = Double(s), v >= 1 { return v }
        return defaultIntervalSeconds
    }

    init(db: Database, log: Logger, interval: TimeInterval = MaintenanceService.intervalFromEnvironment(),
         now: @escaping @Sendable () -> Date = Date.init) {
        self.db = db
        self.log = log
        self.interval = interval
        self.now = now
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

    /// Deletes idempotency records past their retention (SPEC §3: sealed replayable
    /// credentials are purged after 24 h).
    func purgeIdempotencyRecords() {
        do {
            let n = try db.system { c in try IdempotencyStore.purgeExpired(c) }
            if n > 0 { log.info("idempotency records purged", ["count": .int(Int64(n))]) }
        } catch {
            log.error("idempotency purge failed", ["error": .string("\(error)")])
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
        do {
            let removed = try RetentionStore.collect(db, now: clock, dryRun: false) { binding, error in
                log.warning("gc: binding skipped", ["binding": .string(binding), "error": .string("\(error)")])
            }
            for v in removed { log.info("gc: template version removed", GCCommand.json(v, dryRun: false).objectValue ?? [:]) }
            log.info("gc: pass finished", ["removed": .int(Int64(removed.count)), "bytes": .int(removed.reduce(0) { $0 + $1.bytes })])
            purgeIdempotencyRecords()
            purgeEvents(now: clock)
            return removed
        } catch {
            log.error("gc: pass failed", ["error": .string("\(error)")])
            return []
        }
    }
}
