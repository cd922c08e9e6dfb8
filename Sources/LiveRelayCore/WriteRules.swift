import Foundation
import JSON

/// Target `status` values (docs/write-semantics.md).
public enum TargetStatus: String, Sendable, CaseIterable {
    case reserved, starting
    case tokenPending = "token_pending"
    case ready, ending, ended
    case creationFailed = "creation_failed"
    case startUnknown = "start_unknown"

    /// `ending`, `ended`, `creation_failed`: no further update or state-bearing end (rule 5).
    public var refusesWrites: Bool { self == .ending || self == .ended || self == .creationFailed }
    /// `ended` or `creation_failed`: nothing will ever be delivered to it again.
    public var isTerminal: Bool { self == .ended || self == .creationFailed }
}

/// Operation `status` values (docs/write-semantics.md).
public enum OperationStatus: String, Sendable, CaseIterable {
    case queued, sending, accepted, failed, cancelled, superseded, unknown, expired

    /// Whether the operation is finished (nothing more will happen to it).
    public var isFinal: Bool { !(self == .queued || self == .sending) }
}

/// A queued operation of a target, as coalescing sees it.
public struct QueuedOperation: Sendable, Equatable {
    public let id: String
    public let kind: PushEvent
    public let hasState: Bool
    public let hasAlert: Bool
    /// The UTC day (`YYYY-MM-DD`) whose quota unit the operation holds reserved, nil when it
    /// consumes no quota (docs/write-path.md "Quota kept by the writer").
    public let quotaDay: String?
    public init(id: String, kind: PushEvent, hasState: Bool, hasAlert: Bool, quotaDay: String? = nil) {
        self.id = id; self.kind = kind; self.hasState = hasState; self.hasAlert = hasAlert; self.quotaDay = quotaDay
    }
}

/// The ordered rules of docs/write-semantics.md as pure functions; handlers call them in rule order.
public enum WriteRules {
    /// Rule 5: update or state-bearing end on an `ending`/`ended`/`creation_failed` target →
    /// `409 TARGET_ENDED`. A stateless end is rule 9's business instead.
    public static func checkWritable(_ status: TargetStatus, statelessEnd: Bool) throws {
        if status.refusesWrites && !statelessEnd {
            throw DomainError(
                status: 409, code: "TARGET_ENDED", message: "the target is \(status.rawValue); it takes no more updates",
                details: ["status": .string(status.rawValue)])
        }
    }

    /// Rule 6: `expected_revision` must equal the current revision.
    public static func checkRevision(expected: Int64, current: Int64) throws {
        if expected != current {
            throw DomainError(
                status: 409, code: "REVISION_CONFLICT",
                message: "expected_revision \(expected) does not match the current revision \(current)",
                details: ["current_revision": .int(current), "field": "expected_revision"])
        }
    }

    /// Rule 7: a present `source_version` must be greater than the last one accepted.
    public static func checkSourceVersion(_ new: Int64?, last: Int64?) throws {
        if let n = new, let l = last, n <= l {
            throw DomainError(
                status: 409, code: "SOURCE_VERSION_CONFLICT",
                message: "source_version \(n) is not newer than the last accepted \(l)",
                details: ["last_source_version": .int(l), "field": "source_version"])
        }
    }

    /// Most seconds ahead a `dismiss_at` may be (docs/limits.md: now + 4 h).
    public static let maxDismissalSeconds: Double = 4 * 3600

    /// docs/limits.md dismissal: `dismiss_at` ≤ now + 4 h; past or now means remove immediately.
    public static func checkDismissAt(_ d: Date?, now: Date) throws {
        if let d, d.timeIntervalSince(now) > maxDismissalSeconds {
            throw DomainError.invalid("dismiss_at", "dismiss_at may be at most 4 hours from now")
        }
    }

    /// docs/write-semantics.md: a start with `stale_at` not in the future → 400.
    public static func checkStartStaleAt(_ d: Date?, now: Date) throws {
        if let d, d <= now { throw DomainError.invalid("stale_at", "stale_at must be in the future") }
    }

    /// `expires_at` must be in the future (nothing could be delivered otherwise).
    public static func checkExpiresAt(_ d: Date?, now: Date) throws {
        if let d, d <= now { throw DomainError.invalid("expires_at", "expires_at must be in the future") }
    }

    /// Rule 4: a start needs an `alert` (docs/http-conventions.md: `400 INVALID_REQUEST`, `details.field: "alert"`).
    public static func requireStartAlert(_ a: PushAlert?) throws -> PushAlert {
        guard let a else { throw DomainError.invalid("alert", "a start requires alert {title, body}") }
        return a
    }

    /// Which queued operations a new write supersedes (docs/write-semantics.md "Ordering and coalescing"):
    /// a state-bearing write supersedes queued **state-only** updates (no alert); an end
    /// supersedes every queued update and every older queued end (duplicate cleanups collapse
    /// into the newest, docs/delivery.md). Starts are never superseded, nor alert updates
    /// except by an end.
    public static func superseded(by kind: PushEvent, hasState: Bool, queued: [QueuedOperation]) -> [String] {
        supersededOperations(by: kind, hasState: hasState, queued: queued).map(\.id)
    }

    /// Whether a write leaves its target's dispatch head as it was, so that it need not refresh
    /// it (docs/write-path.md "A head the write cannot change"). The head is the target's first
    /// queued or sending operation by `seq`. The write appends an operation after every existing
    /// one and supersedes `victims`, some of `queued` (the target's queued operations in `seq`
    /// order, locked by the write). When the first of `queued` is not a victim, it and every
    /// operation before it (sending ones, which the write does not touch) stay where they were.
    /// - Returns: true when `queued` is not empty and its first operation is not in `victims`.
    public static func keepsHead(queued: [QueuedOperation], victims: [QueuedOperation]) -> Bool {
        guard let first = queued.first else { return false }
        return !victims.contains { $0.id == first.id }
    }

    /// The operations of `queued` that `superseded(by:hasState:queued:)` names, in queue order.
    public static func supersededOperations(by kind: PushEvent, hasState: Bool, queued: [QueuedOperation]) -> [QueuedOperation] {
        queued.filter { q in
            if kind == .end { return q.kind == .update || q.kind == .end }
            guard q.kind == .update else { return false }
            return hasState && !q.hasAlert
        }
    }

    /// The net change of reserved quota units, per UTC day, of a write that inserts an
    /// operation reserving a unit of `insertedDay` (nil: it consumes none) and supersedes
    /// `superseded` (each releasing the unit of its `quotaDay`): days whose change is not zero
    /// (docs/write-path.md "Quota kept by the writer"). An update replacing a queued update of
    /// the same day changes nothing.
    ///
    /// Order: `insertedDay` first, then the other days newest first. Each change locks a
    /// counter row of its day, and the exact quota path locks every row of the inserted day
    /// (today) before the writes, as the triggers did: a writer taking an older day's row
    /// first could hold it while it waits for today's row, which such a write holds.
    public static func reservationChanges(insertedDay: String?, superseded: [QueuedOperation]) -> [(day: String, change: Int64)] {
        var change: [String: Int64] = [:]
        if let insertedDay { change[insertedDay, default: 0] += 1 }
        for q in superseded { if let d = q.quotaDay { change[d, default: 0] -= 1 } }
        return change.filter { $0.value != 0 }
            .sorted { a, b in a.key == insertedDay ? b.key != insertedDay : (b.key == insertedDay ? false : a.key > b.key) }
            .map { (day: $0.key, change: $0.value) }
    }

    /// The change of `day` among `reservationChanges(insertedDay:superseded:)`: 0 when none.
    public static func reservation(of day: String, insertedDay: String?, superseded: [QueuedOperation]) -> Int64 {
        reservationChanges(insertedDay: insertedDay, superseded: superseded).first { $0.day == day }?.change ?? 0
    }

    /// When today's (UTC) quota resets: the next UTC midnight after `now`.
    public static func quotaResetsAt(_ now: Date) -> Date {
        let day = (now.timeIntervalSince1970 / 86400).rounded(.down)
        return Date(timeIntervalSince1970: (day + 1) * 86400)
    }

    /// Rule 8 quota: `429 QUOTA_EXCEEDED` when `reserved + used` has reached `limit`.
    public static func checkQuota(limit: Int64, reserved: Int64, used: Int64, now: Date) throws {
        if reserved + used >= limit {
            throw DomainError(
                status: 429, code: "QUOTA_EXCEEDED", message: "today's push quota of \(limit) is used up",
                details: ["resets_at": .string(Timestamp.format(quotaResetsAt(now))), "limit": .int(limit)])
        }
    }

    /// docs/limits.md "local start (device-side) attributes + content state: 4 KiB".
    public static let maxLocalStartBytes = 4096

    /// Measures what a local start puts on the device: `{"attributes": …, "content-state": state}`.
    public static func checkLocalStartSize(attributes: JSONValue, state: JSONValue) throws {
        let n = JSONValue.object(["attributes": attributes, "content-state": state]).serialized().count
        if n > maxLocalStartBytes {
            throw DomainError.limit(
                "state", "attributes plus content state are \(n) bytes; a local start allows \(maxLocalStartBytes)",
                limit: maxLocalStartBytes, actual: n)
        }
    }

    /// Lifetime of an activity (docs/write-semantics.md): the system ends it 8 h after it starts.
    public static let activityLifetimeSeconds: Double = 8 * 3600
}
