import Foundation
import Locking
import Postgres

/// What a dispatcher in this process lends a write for a claim at commit
/// (docs/delivery.md "Claims at commit"): the lease owner and length, the claim's planner
/// settings and the clock of priority-budget decisions.
public struct CommitClaimTerms: Sendable {
    /// Lease owner written on the claimed operation (the dispatcher's `workerId`).
    public let worker: String
    /// Lease length in seconds.
    public let leaseSeconds: Double
    /// Transaction-local planner settings of claims (`DispatchStore.claimSettings`).
    public let settings: [(String, String)]
    /// The clock of the priority-budget decision (`DispatchStore.priorityDecisions`).
    public let clock: @Sendable () -> Date

    /// - Parameters: see the properties.
    public init(worker: String, leaseSeconds: Double, settings: [(String, String)], clock: @escaping @Sendable () -> Date) {
        self.worker = worker
        self.leaseSeconds = leaseSeconds
        self.settings = settings
        self.clock = clock
    }
}

/// A dispatcher in this process that takes operations claimed by the very transaction that
/// wrote them (docs/delivery.md "Claims at commit"). Every successful `reserveCommitClaim` is
/// followed by exactly one `takeCommitClaim` (the transaction committed) or
/// `releaseCommitClaim` (it did not).
public protocol CommitClaimTaker: AnyObject, Sendable {
    /// Holds one outstanding slot for a claim at commit; nil when the dispatcher is not
    /// running or the slots it lends to such claims are taken (then the write queues as usual
    /// and the fair or named claim sends it).
    func reserveCommitClaim() -> CommitClaimTerms?
    /// After COMMIT returned at `committedAt`: `ops` (claimed by the write; empty when its
    /// claim found nothing to claim) become this dispatcher's outstanding work; the slot is freed.
    func takeCommitClaim(_ ops: [DispatchOperation], committedAt: Date)
    /// The transaction did not commit, the outcome of its COMMIT is unknown (the connection
    /// broke after COMMIT was sent), or its COMMIT returned more than half a lease after the
    /// claim (the lease can no longer be trusted): the slot is freed. `claimed`: what the transaction's claim
    /// had taken (empty when the claim never ran or took nothing); the taker must put those back
    /// in the queue should they have been committed after all (they were never sent).
    func releaseCommitClaim(claimed: [DispatchOperation])
    /// Holds up to `want` outstanding slots for the fan-out expander's claim of tenant
    /// `tenantId`'s members (docs/delivery.md "Claims at fan-out"): the terms and how many
    /// slots it lends (at least 1), or nil (then the batch queues every operation as usual).
    func reserveFanoutClaim(tenantId: String, want: Int) -> (terms: CommitClaimTerms, slots: Int)?
    /// After the expander's COMMIT: `ops` (at most the slots lent) become outstanding work; the
    /// `lent` slots are freed.
    func takeFanoutClaim(_ ops: [DispatchOperation], tenantId: String, lent: Int)
    /// The expander's transaction did not commit (or its outcome is unknown, or it took more
    /// than half a lease): the `lent` slots are freed and `claimed` goes back to the queue
    /// should it have been committed after all.
    func releaseFanoutClaim(claimed: [DispatchOperation], tenantId: String, lent: Int)
}

extension CommitClaimTaker {
    /// Lends nothing: a taker without claims at fan-out.
    public func reserveFanoutClaim(tenantId: String, want: Int) -> (terms: CommitClaimTerms, slots: Int)? { nil }
    /// Never called when `reserveFanoutClaim` lends nothing.
    public func takeFanoutClaim(_ ops: [DispatchOperation], tenantId: String, lent: Int) {}
    /// Never called when `reserveFanoutClaim` lends nothing.
    public func releaseFanoutClaim(claimed: [DispatchOperation], tenantId: String, lent: Int) {}
}

/// Where a `Database`'s writes find the dispatcher of this process that takes claims at
/// commit (at most one; `Dispatcher.start` registers itself, `stop` withdraws).
public final class CommitClaimRegistry: Sendable {
    private let taker = Locked<(any CommitClaimTaker)?>(nil)

    /// Makes `t` the taker (nil: none).
    public func register(_ t: (any CommitClaimTaker)?) { taker.withLock { $0 = t } }

    /// Withdraws `t` when it is the registered taker.
    public func withdraw(_ t: any CommitClaimTaker) { taker.withLock { if $0 === t { $0 = nil } } }

    /// The registered taker, if any.
    public var current: (any CommitClaimTaker)? { taker.withLock { $0 } }
}

/// A claim at commit (docs/delivery.md "Claims at commit"): a write that queues an operation
/// on a target claims it in its own transaction, with the dispatcher's claim statement
/// (`DispatchStore.claimStatement`: same re-check, locks, lease, timestamp and parking), and
/// hands it to the dispatcher of this process after COMMIT, so no claim transaction stands
/// between the commit and the provider request. When the operation is not its target's head
/// (an older one is in flight), the claim finds nothing and the operation waits in
/// `dispatch_heads` as usual. Statements only join the write's existing pipelines: the write
/// makes no extra round trip.
///
/// Use: `begin` (nil → queue as usual); pipeline `prelude` before the operation's insert and
/// `claim` after it (and after any supersede) in the same round trip; pass the claim's result
/// to `read` and pipeline the statements it returns before COMMIT.
public final class CommitClaim: @unchecked Sendable {  // the box is written before COMMIT, read after
    /// The transaction-local setting naming the operation this transaction claims at commit:
    /// the insert trigger of migration 0027 does not refresh that operation's dispatch head
    /// (the claim would delete the row again), and `read` refreshes it when the claim did not
    /// take the operation.
    public static let operationSetting = "liverelay.claim_at_commit"

    /// The lent terms.
    public let terms: CommitClaimTerms
    private let taker: any CommitClaimTaker
    private let box = Locked<[DispatchOperation]>([])
    /// When `read` saw the claim's result (this process's clock): the lease started about then.
    private let readAt = Locked<Date?>(nil)

    private init(terms: CommitClaimTerms, taker: any CommitClaimTaker) {
        self.terms = terms
        self.taker = taker
    }

    /// Reserves a slot of `db`'s registered taker and registers the transaction hook that
    /// hands the claimed operations over after COMMIT (or frees the slot on rollback).
    /// Returns nil when there is no taker or it has no slot to lend.
    public static func begin(_ c: PostgresConnection, db: Database) -> CommitClaim? {
        guard let taker = db.commitClaims.current, let terms = taker.reserveCommitClaim() else { return nil }
        let claim = CommitClaim(terms: terms, taker: taker)
        c.addTransactionHook(
            handOverHook(
                leaseSeconds: terms.leaseSeconds, claimed: claim.box, leaseStart: claim.readAt,
                take: { ops, at in taker.takeCommitClaim(ops, committedAt: at) }, release: { taker.releaseCommitClaim(claimed: $0) }))
        return claim
    }

    /// To pipeline before the insert of operation `operationId`: sets (transaction-local)
    /// `operationSetting` and the claim's planner settings, which stay in force for the rest
    /// of the write.
    public func prelude(operationId: String) -> PostgresStatement {
        .localSettings(settings(operationId: operationId))
    }

    /// The `(name, value)` settings of `prelude`, for a write that sends them in a statement of
    /// its own settings (`WritePath.headByWriter(operationId:with:)`).
    public func settings(operationId: String) -> [(String, String)] {
        [(Self.operationSetting, operationId)] + terms.settings
    }

    /// To pipeline after the insert (and supersede) of operation `operationId` of `tenantId`:
    /// the claim; its result goes to `read`.
    public func claim(tenantId: String, operationId: String) -> PostgresStatement {
        DispatchStore.claimStatement(worker: terms.worker, ids: [(tenantId, operationId)], limit: 1, leaseSeconds: terms.leaseSeconds, now: Date())
    }

    /// Reads the claim's result: remembers what was claimed for the hand-over and returns the
    /// statements to run before COMMIT: the priority-budget UPDATE when a decision changed the
    /// row, or, when the claim did not take the operation (not the head, parked, target over),
    /// the dispatch-head refresh its insert left to this write (`operationSetting`).
    /// - Throws: `PostgresError` when a row cannot be decoded.
    public func read(_ r: PostgresResult, tenantId: String, targetId: String) throws -> [PostgresStatement] {
        let (claimed, _) = try DispatchStore.claimedRows(r.rows)
        let (decided, update) = DispatchStore.priorityDecisions(claimed, now: terms.clock())
        box.withLock { $0 = decided }
        readAt.withLock { $0 = Date() }
        if decided.isEmpty {
            return [PostgresStatement("SELECT lr_dispatch_heads_refresh_set(ARRAY[$1::text], ARRAY[$2::text])", [tenantId, targetId])]
        }
        return update.map { [$0] } ?? []
    }

    /// Whether the claim took the operation (valid after `read`).
    public var claimedAny: Bool { box.withLock { !$0.isEmpty } }
}

/// A claim at fan-out (docs/delivery.md "Claims at fan-out"): a batch of the fan-out expander
/// (`FanoutStore.expandBatch`) inserts the first operation of each member that has nothing
/// queued or in flight, and whose token is registered, directly as `sending` under the
/// dispatcher's lease, with its APNs `timestamp` (the claim's rules: attempt 1, stamp
/// `max(now, the target's clock + 1)`), up to the slots lent; after COMMIT they go to the
/// dispatcher of this process, like a claim's result. What is not inserted as `sending`
/// waits in `dispatch_heads` for the fair claim as before. Saves each such push the claim's
/// rewrite of its wide `operations` row, its head's insert and delete, and the claim
/// transaction.
///
/// Use: `begin` inside the expander's transaction (nil → no slots: queue as usual); pass it to
/// `expandBatch` as its `reserve`, which calls `record`.
public final class FanoutClaim: @unchecked Sendable {  // the box is written before COMMIT, read after
    /// The lent terms.
    public let terms: CommitClaimTerms
    /// Operations this batch may insert as `sending` (the slots lent, at least 1).
    public let slots: Int
    private let taker: any CommitClaimTaker
    private let box = Locked<[DispatchOperation]>([])
    private let readAt = Locked<Date?>(nil)

    private init(terms: CommitClaimTerms, slots: Int, taker: any CommitClaimTaker) {
        self.terms = terms
        self.slots = slots
        self.taker = taker
    }

    /// Reserves up to `want` slots of `db`'s registered taker for tenant `tenantId` and
    /// registers the transaction hook that hands the claimed operations over after COMMIT
    /// (or frees the slots on rollback). Nil when there is no taker or it lends nothing.
    public static func begin(_ c: PostgresConnection, db: Database, tenantId: String, want: Int) -> FanoutClaim? {
        guard want > 0, let taker = db.commitClaims.current, let lent = taker.reserveFanoutClaim(tenantId: tenantId, want: want) else {
            return nil
        }
        let claim = FanoutClaim(terms: lent.terms, slots: lent.slots, taker: taker)
        c.addTransactionHook(
            handOverHook(
                leaseSeconds: lent.terms.leaseSeconds, claimed: claim.box, leaseStart: claim.readAt,
                take: { ops, _ in taker.takeFanoutClaim(ops, tenantId: tenantId, lent: lent.slots) },
                release: { taker.releaseFanoutClaim(claimed: $0, tenantId: tenantId, lent: lent.slots) }))
        return claim
    }

    /// Remembers what the batch inserted as `sending` (after the priority-budget decisions),
    /// for the hand-over at COMMIT, and when the insert was sent (`insertedAt`: their lease
    /// started then; a COMMIT more than half a lease later returns them to the queue).
    func record(_ ops: [DispatchOperation], insertedAt: Date) {
        box.withLock { $0 = ops }
        readAt.withLock { $0 = insertedAt }
    }

    /// What the batch inserted as `sending` (tests).
    public var claimed: [DispatchOperation] { box.withLock { $0 } }
}

/// The transaction hook of a claim at commit or at fan-out (docs/delivery.md "Claims at
/// commit"): after COMMIT returned at `at`, `take` what `claimed` holds; on rollback, or when
/// COMMIT came more than half of `leaseSeconds` (seconds) after `leaseStart` (a stalled server
/// or standby: the lease may run out before the push is sent, and the lease rescue may already
/// be at it), `release` it instead, so it goes back to the queue (fenced) and is not sent.
func handOverHook(
    leaseSeconds: Double, claimed: Locked<[DispatchOperation]>, leaseStart: Locked<Date?>,
    take: @escaping @Sendable ([DispatchOperation], Date) -> Void, release: @escaping @Sendable ([DispatchOperation]) -> Void
) -> TransactionHook {
    TransactionHook(
        committed: { at in
            let ops = claimed.withLock { $0 }
            if !ops.isEmpty, let start = leaseStart.withLock({ $0 }), at.timeIntervalSince(start) > leaseSeconds / 2 {
                release(ops)
            } else {
                take(ops, at)
            }
        },
        rolledBack: { release(claimed.withLock { $0 }) })
}
