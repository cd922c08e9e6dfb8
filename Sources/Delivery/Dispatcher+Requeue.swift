import Foundation
import LiveRelayStore

/// Putting claimed work back (docs/delivery.md "Claims"): operations a claim took but this
/// dispatcher will not send (stopping, a COMMIT whose outcome is unknown or came too late)
/// return to the queue, fenced by their claim's `sent_at`; operations a committed claim parked
/// are re-checked for a token registered meanwhile.
extension Dispatcher {
    /// Puts claimed, never-sent operations of this worker back in the queue
    /// (`DispatchStore.unclaim`: the attempt is not counted; a row that is no longer this
    /// worker's `sending` one is left alone). A failure is logged with `why`; their leases then
    /// expire and are rescued.
    /// Each claim's operations are fenced by the `sent_at` that claim wrote
    /// (`DispatchOperation.claimedAt`), so a return never touches a later claim of the same
    /// operation. Returns false when the database could not be reached (logged).
    @discardableResult
    func returnToQueue(_ ops: [DispatchOperation], why: String, logFailure: Bool = true) -> Bool {
        guard !ops.isEmpty else { return true }
        do {
            try db.system { c in
                for (stamp, group) in Dictionary(grouping: ops, by: \.claimedAt) {
                    try DispatchStore.unclaim(
                        c, worker: configuration.workerId, operations: group.map { ($0.tenantId, $0.id) }, claimedAt: stamp)
                }
            }
            return true
        } catch {
            if logFailure {
                log.warning(
                    "could not return operations to the queue; their leases will expire",
                    ["reason": .string(why), "count": .int(Int64(ops.count)), "error": .string("\(error)")])
            }
            return false
        }
    }

    /// `returnToQueue` on a thread of its own, for operations a claim's transaction may or may
    /// not have committed (its COMMIT's outcome is unknown): first 0.5 s later, so a COMMIT the
    /// server was still finishing is visible, then, while the database cannot be reached, again
    /// 2 s and then 5 s after the previous try. The fence makes a repeat harmless.
    func returnToQueueLater(_ ops: [DispatchOperation], why: String) {
        guard !ops.isEmpty else { return }
        DispatchQueue.global().async { [self] in
            for (i, delay) in [0.5, 2, 5].enumerated() {
                Thread.sleep(forTimeInterval: delay)
                if returnToQueue(ops, why: why, logFailure: i == 2) { return }
            }
        }
    }

    /// After a committed claim that parked `ops` (token missing): un-parks those whose token was
    /// registered meanwhile (`DispatchStore.unparkIfTokenReady`), at once and again 1 s later (a
    /// registration that straddled the claim's COMMIT has committed by then), on a thread of its
    /// own; wakes the fair claim when one was un-parked. Without it they waited for the un-park
    /// sweep (docs/delivery.md "Claims").
    func recheckParked(_ ops: [(tenantId: String, id: String)]) {
        guard !ops.isEmpty else { return }
        DispatchQueue.global().async { [self] in
            for delay in [0.0, 1.0] {
                if delay > 0 { Thread.sleep(forTimeInterval: delay) }
                guard isRunningLocked() else { return }
                do {
                    if try db.system({ c in try DispatchStore.unparkIfTokenReady(c, operations: ops) }) > 0 { wake() }
                } catch {
                    log.warning("could not re-check parked operations; the un-park sweep will", ["error": .string("\(error)")])
                }
            }
        }
    }
}
