import Foundation
import LiveRelayStore

/// Claims at commit (docs/delivery.md "Claims at commit"): the dispatcher lends outstanding
/// slots to writes of this process on the same `Database`, which claim the operation they queue
/// in their own transaction (`CommitClaim`) and hand it over after COMMIT.
extension Dispatcher {
    /// Lends one outstanding slot to a write that claims its operation at commit
    /// (docs/delivery.md "Claims at commit"; `CommitClaimTaker`): only while running, with
    /// `claimAtCommit` on, and while fewer than half of `maxOutstanding` are outstanding or
    /// lent (none when `maxOutstanding` < 2), so the fair and named claims always keep the other
    /// half for every tenant's queue.
    public func reserveCommitClaim() -> CommitClaimTerms? {
        cond.lock()
        defer { cond.unlock() }
        guard isRunning, configuration.claimAtCommit, outstanding.count + commitReserved < maxOutstanding / 2 else { return nil }
        commitReserved += 1
        return claimTerms
    }

    /// What this dispatcher lends a claim at commit or at fan-out: its worker id as lease
    /// owner, its lease (seconds), its claims' planner settings and its clock.
    var claimTerms: CommitClaimTerms {
        CommitClaimTerms(
            worker: configuration.workerId, leaseSeconds: configuration.leaseSeconds, settings: configuration.claimSettings,
            clock: configuration.clock)
    }

    /// Takes what a write claimed at commit (`CommitClaimTaker`): records each operation's
    /// commit time (the start of its lag) and hands it to the submitters like a claim's result,
    /// the lent slot becoming its outstanding entry (`hand(_:lent:)`). When stopping, the
    /// operations go back to the queue instead.
    public func takeCommitClaim(_ ops: [DispatchOperation], committedAt: Date) {
        commitHints.record(ops.map(\.id), at: committedAt)
        guard hand(ops, lent: 1), !ops.isEmpty else { return }
        counters.claimedAtCommit(ops.count)
        claimedAtCommitTotal.increment([], by: Double(ops.count))
        for op in ops where op.budgetDecision?.downgraded == true { priorityDowngrades.increment([]) }
    }

    /// Slots lent to writes claiming at commit and not yet taken or released (tests).
    public var commitClaimsLent: Int { cond.lock(); defer { cond.unlock() }; return commitReserved }

    /// Frees a slot lent to a write that did not commit, or whose COMMIT's outcome is unknown
    /// (`CommitClaimTaker`). What its claim had taken is returned to the queue should the
    /// transaction have committed after all (`DispatchStore.unclaim`, fenced by the claim's
    /// `sent_at`: nothing when it did not), on a thread of its own and a little later
    /// (`returnToQueueLater`): the caller is the write's request thread, and the server may
    /// still be finishing that COMMIT.
    public func releaseCommitClaim(claimed ops: [DispatchOperation]) {
        _ = hand([], lent: 1)
        returnToQueueLater(ops, why: "a claim at commit whose transaction did not report COMMIT")
    }

    /// Lends up to `want` outstanding slots to the fan-out expander for tenant `tenantId`'s
    /// members (docs/delivery.md "Claims at fan-out"; `CommitClaimTaker`): on the terms of a
    /// claim at commit (running, `claimAtCommit` on, lent and outstanding slots below half of
    /// `maxOutstanding`), and never more than the tenant's room (`tenantRoom`, which counts
    /// these reservations as held until they are taken or released), so a tenant's fan-out
    /// takes no more slots than its fair claims could.
    public func reserveFanoutClaim(tenantId: String, want: Int) -> (terms: CommitClaimTerms, slots: Int)? {
        cond.lock()
        defer { cond.unlock() }
        guard isRunning, configuration.claimAtCommit, want > 0 else { return nil }
        let room = tenantRoom()
        let n = min(want, maxOutstanding / 2 - outstanding.count - commitReserved, room.held[tenantId] ?? room.other)
        guard n > 0 else { return nil }
        commitReserved += n
        fanoutReserved[tenantId, default: 0] += n
        return (claimTerms, n)
    }

    /// Takes what a fan-out batch inserted as `sending` (`CommitClaimTaker`): handed to the
    /// submitters like a claim's result; the `lent` slots become their outstanding entries (the
    /// rest are freed). When stopping, they go back to the queue instead.
    public func takeFanoutClaim(_ ops: [DispatchOperation], tenantId: String, lent: Int) {
        guard hand(ops, lent: lent, fanoutTenant: tenantId), !ops.isEmpty else { return }
        counters.claimedAtFanout(ops.count)
        claimedAtFanoutTotal.increment([], by: Double(ops.count))
        for op in ops where op.budgetDecision?.downgraded == true { priorityDowngrades.increment([]) }
    }

    /// Frees the `lent` slots of a fan-out batch that did not commit (or whose COMMIT's outcome
    /// is unknown, or came too late); what it inserted as `sending` goes back to the queue
    /// should it have been committed after all (`returnToQueueLater`, fenced by `sent_at`).
    public func releaseFanoutClaim(claimed ops: [DispatchOperation], tenantId: String, lent: Int) {
        _ = hand([], lent: lent, fanoutTenant: tenantId)
        returnToQueueLater(ops, why: "a fan-out batch whose transaction did not report COMMIT")
    }
}
