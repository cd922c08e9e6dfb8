import Foundation
import LiveRelayCore
import LiveRelayStore
import Postgres

/// Applying results (docs/delivery.md "Applying results"): completions queue under
/// `applyCond` and the appliers take them in batches; results that lost the database connection
/// are kept and applied again. State under `applyCond` (and `cond` for the outstanding slots).
extension Dispatcher {
    /// Queues a finished attempt for the applier (any thread; short).
    func complete(_ c: Completion) {
        applyCond.lock()
        completions.append(c)
        if completions.count == 1 { oldestCompletionAt = ProcessInfo.processInfo.systemUptime }
        // The threshold also ends a gathering applier's wait (`applyLoop`).
        if completions.count == 1 || completions.count == applyStartThreshold || (appliersBusy > 0 && completions.count >= applyStartThreshold) {
            applyCond.signal()
        }
        applyCond.unlock()
    }

    // MARK: apply

    /// Completions waiting before a further applier starts while another is busy
    /// (`DispatcherConfiguration.applierThreads`): half of a batch or of what can still wait
    /// beside the results inside apply transactions (`maxOutstanding` bounds them together), so
    /// it can always be reached. Call under `applyCond`.
    var applyStartThreshold: Int {
        max(1, min(configuration.applyBatchSize, maxOutstanding - resultsInApply) / 2)
    }

    /// One applier thread: takes up to `applyBatchSize` completions when no applier is busy, or
    /// when at least `applyStartThreshold` wait (or the dispatcher stops), and applies them.
    func applyLoop() {
        while true {
            applyCond.lock()
            while true {
                while !(completions.count > 0 && (appliersBusy == 0 || completions.count >= applyStartThreshold || applierStop)) {
                    if applierStop && completions.isEmpty { applyCond.unlock(); return }
                    applyCond.wait()
                }
                // A small batch waits a moment (monotonic clock) for more results to join it.
                let left = oldestCompletionAt + configuration.applyGatherSeconds - ProcessInfo.processInfo.systemUptime
                guard !applierStop, completions.count < applyStartThreshold, left > 0 else { break }
                _ = applyCond.wait(until: Date().addingTimeInterval(min(left, configuration.applyGatherSeconds)))
            }
            let batch = Array(completions.prefix(configuration.applyBatchSize))
            completions.removeFirst(batch.count)
            if !completions.isEmpty { oldestCompletionAt = ProcessInfo.processInfo.systemUptime }  // approximately: arrived while applying
            appliersBusy += 1
            resultsInApply += batch.count
            if completions.count >= applyStartThreshold { applyCond.signal() }  // enough left for another applier
            applyCond.unlock()
            defer {
                applyCond.lock()
                appliersBusy -= 1
                resultsInApply -= batch.count
                if !completions.isEmpty { applyCond.signal() }  // what arrived meanwhile, if no one else took it
                applyCond.unlock()
            }
            applyBatch.observe([], Double(batch.count))

            let now = Date()
            let decided = batch.map {
                (
                    $0,
                    DispatchDecision.decide(
                        $0.op.facts, $0.result, now: now, random: configuration.random(),
                        policy: configuration.retryPolicy)
                )
            }
            var applied: [Bool] = []
            var headsDue = false
            let serial = decided.contains { DispatchStore.reachesBeyondTarget(channelId: $0.0.op.channelId, $0.1) }
            if serial { effectsLock.lock() }
            defer { if serial { effectsLock.unlock() } }
            let began = Date()
            var retry: [Completion] = []
            do {
                (applied, headsDue) = try db.system { c in try applyBatch(c, decided) }
                counters.applied(decided.count, seconds: Date().timeIntervalSince(began))
            } catch {
                // One bad row must not hold the others back: apply one by one.
                log.warning("batched apply failed; applying one by one", ["error": .string("\(error)")])
                let uptime = ProcessInfo.processInfo.systemUptime
                applied = decided.map { item in
                    headsDue = true  // not worth a probe per row on this rare path
                    do { return try db.system { c in try applyBatch(c, [item]).applied[0] } } catch {
                        // The provider's answer is known: when the database could not be reached,
                        // keep it (still outstanding, so its lease is renewed) and apply it again,
                        // for half a lease; a short outage must not turn an accepted start or
                        // alert into `unknown` through the lease rescue. The apply is fenced by
                        // lease owner and attempt, so a repeat is harmless. A statement error
                        // (the row itself) is not retried: it would fail again.
                        let since = item.0.applyFailedSince ?? uptime
                        let connectionLost = (error as? PostgresError)?.kind == .connection
                        if connectionLost && uptime - since < configuration.leaseSeconds / 2 && !isStoppingAppliers() {
                            var again = item.0
                            again.applyFailedSince = since
                            retry.append(again)
                            log.warning(
                                "could not apply a result; trying again",
                                ["operation_id": .string(item.0.op.id), "error": .string("\(error)")])
                        } else {
                            log.error(
                                "could not apply a result; the lease will expire and be rescued",
                                ["operation_id": .string(item.0.op.id), "error": .string("\(error)")])
                        }
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
            let retrying = Set(retry.map(\.op.id))
            cond.lock()
            for comp in batch where !retrying.contains(comp.op.id) { release(comp.op.id) }
            // A finished operation may have made the next one of its target a due head: only
            // then is a fair claim worth running (docs/delivery.md "Wake-ups"). The freed slots
            // still wake a claim loop whose last claim was full.
            if headsDue { wakeRequested = true }
            cond.broadcast()
            cond.unlock()
            if !retry.isEmpty {
                counters.applyRetried(retry.count)
                // Back in 0.5 s (the database is in trouble: no busy loop), without holding this
                // applier, its locks or `effectsLock` meanwhile.
                let again = retry
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { [self] in
                    applyCond.lock()
                    completions.insert(contentsOf: again, at: 0)
                    oldestCompletionAt = ProcessInfo.processInfo.systemUptime
                    applyCond.signal()
                    applyCond.unlock()
                }
            }
        }
    }

    /// Whether the appliers were told to stop (then results that failed to apply are not kept).
    func isStoppingAppliers() -> Bool {
        applyCond.lock()
        defer { applyCond.unlock() }
        return applierStop
    }

    /// Applies a batch in the caller's transaction (`DispatchStore.applyResults`: every outcome
    /// class in bulk, target effects per row) and runs `afterApply` on what was applied.
    /// Returns which results were applied, and whether any of their targets now has a due
    /// head (`DispatchStore.anyDueHead`), i.e. whether the fair claim has something to take.
    func applyBatch(_ c: PostgresConnection, _ decided: [(Completion, DispatchDecision)]) throws -> (applied: [Bool], headsDue: Bool) {
        let results = decided.map { comp, d in
            DispatchStore.Result(op: comp.op, decision: d, apnsId: comp.apnsId, usedToken: comp.token)
        }
        let done = try DispatchStore.applyResults(c, results, owner: configuration.workerId)
        let applied = results.filter { done.contains($0.op.id) }
        try afterApply(c, applied)
        let headsDue = try DispatchStore.anyDueHead(c, targets: applied.map { ($0.op.tenantId, $0.op.targetId) })
        let flags = decided.map { comp, _ in
            let ok = done.contains(comp.op.id)
            if !ok { log.warning("result discarded: the operation's lease was taken over", ["operation_id": .string(comp.op.id)]) }
            return ok
        }
        return (flags, headsDue)
    }

    /// The one place for per-outcome side effects that belong in the apply transaction
    /// (events, budgets): called with every result applied, in the same transaction, after the
    /// operation rows and their target effects were written. Does nothing yet.
    func afterApply(_ c: PostgresConnection, _ applied: [DispatchStore.Result]) throws {}
}
