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
        return CommitClaimTerms(
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
}
