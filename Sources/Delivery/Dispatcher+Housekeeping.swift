import Foundation
import LiveRelayCore
import LiveRelayStore

/// Heartbeats (a thread of their own), maintenance passes (lease rescue, expiry, token-pending sweep, planner statistics,
/// queue gauges) and the lifetime sweep of the dispatcher (docs/delivery.md "Metrics",
/// "Maintenance cost", "Planner statistics").
extension Dispatcher {
    // MARK: housekeeping

    /// Renews the leases of every outstanding operation every `heartbeatSeconds`, on a thread
    /// of its own: a maintenance pass (lease rescue, sweeps over large tables, ANALYZE, each
    /// statement up to the statement timeout) must never delay a renewal, or the leases of
    /// pushes in flight would lapse and be rescued while they are being sent.
    func heartbeatLoop() {
        var lastHeartbeat = Date()
        while true {
            cond.lock()
            if running { _ = cond.wait(until: lastHeartbeat.addingTimeInterval(configuration.heartbeatSeconds)) }
            let live = running
            let mine = Array(outstanding.values)
            cond.unlock()
            if !live { return }
            let now = Date()
            guard now.timeIntervalSince(lastHeartbeat) >= configuration.heartbeatSeconds else { continue }
            lastHeartbeat = now
            do {
                _ = try db.system { c in
                    try DispatchStore.heartbeat(c, worker: configuration.workerId, operations: mine, leaseSeconds: configuration.leaseSeconds)
                }
            } catch { log.warning("heartbeat failed", ["error": .string("\(error)")]) }
        }
    }

    func housekeepingLoop() {
        var lastMaintenance = Date.distantPast, lastLifetime = Date.distantPast
        while true {
            cond.lock()
            if running { _ = cond.wait(until: Date().addingTimeInterval(min(0.25, configuration.maintenanceSeconds))) }
            let live = running
            cond.unlock()
            if !live { return }
            let now = Date()
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

    /// Records a paced scan's run (`SweepPacer`) and logs when its cost stretched the pause
    /// beyond the configured interval (once per change of the stretched pause's whole seconds).
    private func paced(_ pacer: LockedValue<SweepPacer>, _ name: String, started: Date) {
        let seconds = Date().timeIntervalSince(started)
        var p = pacer.get()
        let before = p.lastPauseSeconds
        let pause = p.ran(startedAt: started, seconds: seconds)
        pacer.set(p)
        if pause > p.intervalSeconds, Int(pause) != Int(before) {
            log.info(
                "scan spaced out by its cost",
                ["scan": .string(name), "took_ms": .int(Int64(seconds * 1000)), "next_in_seconds": .int(Int64(pause.rounded()))])
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
                    let d = DispatchDecision.decide(
                        op.facts, .leaseExpired, now: now, random: configuration.random(), policy: configuration.retryPolicy)
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
            if unparkPacer.get().isDue(Date()) {
                let started = Date()
                let unparked = try db.system { c in try DispatchStore.unparkTokenPending(c) }
                paced(unparkPacer, "token-pending sweep", started: started)
                if unparked > 0 { wake() }
            }
            if Date().timeIntervalSince(lastStatistics.get()) >= configuration.statisticsSweepSeconds {
                lastStatistics.set(Date())
                let analyzed = try db.system { c in try PlannerStatistics.refresh(c) }
                if !analyzed.isEmpty { log.info("refreshed planner statistics", ["tables": .string(analyzed.joined(separator: ","))]) }
            }
            if tenantSamplePacer.get().isDue(Date()) {
                let started = Date()
                let queues = try db.system { c in try DispatchStore.tenantQueues(c) }
                paced(tenantSamplePacer, "queue gauges", started: started)
                queueDepthValue.set(Double(queues.reduce(0) { $0 + $1.depth }))
                tenantQueues.set(
                    TenantQueueGauges.fold(
                        queues.map {
                            TenantQueueGauges.Entry(tenant: $0.tenantId, depth: Double($0.depth), oldestDueSeconds: $0.oldestDueSeconds)
                        }, top: configuration.tenantGaugeTop))
            }
        } catch {
            if isRunningLocked() { log.warning("maintenance failed", ["error": .string("\(error)")]) }
        }
    }
}
