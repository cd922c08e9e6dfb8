import Foundation
import LiveRelayCore
import LiveRelayStore
import Postgres

/// Each tenant's share of the dispatcher's outstanding slots (docs/delivery.md "Claims"): what
/// every tenant holds, the room a claim may give it, and the wake-up of a tenant whose claim
/// was cut by its room. State under `cond`.
extension Dispatcher {
    /// Records `op` as outstanding. Call under `cond`.
    func hold(_ op: DispatchOperation) {
        if outstanding.updateValue((op.tenantId, op.id), forKey: op.id) == nil { heldByTenant[op.tenantId, default: 0] += 1 }
    }

    /// Forgets outstanding operation `id`. Call under `cond`.
    func release(_ id: String) {
        guard let gone = outstanding.removeValue(forKey: id) else { return }
        let held = heldByTenant[gone.tenantId] ?? 1
        // A tenant cut by its room gets a slot back: worth a claim now, not at the next poll.
        if capped.remove(gone.tenantId) != nil { wakeRequested = true }
        heldByTenant[gone.tenantId] = held > 1 ? held - 1 : nil
    }

    /// After a claim that used `room`: the tenants it cut by their room (it took all of it,
    /// or the room was 0) are `capped`, or, when slots of theirs came back while it ran (their
    /// room is above 0 again), the claim loop is woken at once. Call under `cond`.
    func noteRoomCuts(_ claimed: [DispatchOperation], room: (held: [String: Int], other: Int)) {
        var taken: [String: Int] = [:]
        for op in claimed { taken[op.tenantId, default: 0] += 1 }
        let now = tenantRoom()
        for (tenant, r) in room.held where taken[tenant, default: 0] >= r {
            if (now.held[tenant] ?? now.other) > 0 { wakeRequested = true } else { capped.insert(tenant) }
        }
        for (tenant, n) in taken where room.held[tenant] == nil && n >= room.other {
            if (now.held[tenant] ?? now.other) > 0 { wakeRequested = true } else { capped.insert(tenant) }
        }
    }

    /// How many more outstanding slots each tenant may take now (docs/delivery.md "Claims"):
    /// the slots less a reserve for tenants not seen yet (`claimBatchSize`, at most a quarter of
    /// the slots) are shared equally between the tenants holding slots and the asking tenant if
    /// it holds none; a tenant's room is its share less what it holds (at least 0). So a tenant
    /// whose requests hang (a stalled provider host, a blackholed connection) cannot hold every
    /// slot, and every further tenant with work still finds room. `held`: tenants holding slots
    /// → their room; `other`: a tenant holding none. Call under `cond`.
    func tenantRoom() -> (held: [String: Int], other: Int) {
        let shared = maxOutstanding - min(configuration.claimBatchSize, maxOutstanding / 4)
        // Slots lent to a fan-out batch count as held by its tenant (docs/delivery.md "Claims at fan-out").
        let holding = fanoutReserved.isEmpty ? heldByTenant : heldByTenant.merging(fanoutReserved, uniquingKeysWith: +)
        let share = max(1, shared / max(1, holding.count))
        return (holding.mapValues { max(0, share - $0) }, max(1, shared / (holding.count + 1)))
    }
}
