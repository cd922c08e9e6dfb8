import Synchronization

/// A response a handler finishes later without holding a worker thread while it waits (a
/// long-poll): return `HTTPResponse.deferred { completion in … }`; the server keeps the
/// connection suspended (costing no thread) until `completion.complete { … }` is called, from
/// any thread (docs/http-limits.md, "Long-polls").
public struct DeferredResponse: Sendable {
    let start: @Sendable (ResponseCompletion) -> Void

    /// `start` runs once, on a worker thread, right after the handler returned; it must
    /// arrange for `complete` to be called exactly once (later calls are ignored).
    public init(_ start: @escaping @Sendable (ResponseCompletion) -> Void) { self.start = start }
}

/// The one-shot callback that finishes a deferred response. Thread-safe.
public final class ResponseCompletion: Sendable {
    private let fired = Atomic<Bool>(false)
    private let finish: @Sendable (@escaping @Sendable () throws -> HTTPResponse) -> Void
    private let runner: @Sendable (@escaping @Sendable () -> Void) -> Void

    init(
        finish: @escaping @Sendable (@escaping @Sendable () throws -> HTTPResponse) -> Void,
        runner: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) {
        self.finish = finish
        self.runner = runner
    }

    /// True once `complete` was called (or the server gave up on the request at shutdown).
    public var isCompleted: Bool { fired.load(ordering: .acquiring) }

    /// Finishes the request: `produce` runs on the server's worker pool (it may block, e.g. on
    /// a database read); what it returns is sent, and what it throws is mapped as a handler's
    /// error would be (`HTTPError` → its envelope, anything else → 500 `INTERNAL`). Only the
    /// first call counts.
    public func complete(_ produce: @escaping @Sendable () throws -> HTTPResponse) {
        guard !fired.exchange(true, ordering: .acquiringAndReleasing) else { return }
        finish(produce)
    }

    /// Runs `job` on the server's worker pool (for checks between wake-ups that may block);
    /// on the calling thread once the pool has stopped. Jobs run even after completion, so
    /// whatever waits can finish its own bookkeeping.
    public func run(_ job: @escaping @Sendable () -> Void) {
        runner(job)
    }
}
