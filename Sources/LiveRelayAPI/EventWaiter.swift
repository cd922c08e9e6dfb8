import Dispatch
import Foundation
import LiveRelayStore
import Logging
import Postgres
import Locking
import Synchronization

/// Wakes requests that wait for something another node may cause (docs/endpoints.md
/// `wait_until_ready_ms`, §5 `wait_ms`): one LISTEN connection per process on
/// `OperationStore.eventsChannel`; payloads are target or operation ids, several of them
/// separated by spaces when the notifier packed them (`Database.sendNotifications`). Waiters re-check
/// the database after each wake-up, so a missed notification only costs the 1 s re-check
/// interval, never correctness. No sleep loops on the request path.
///
/// `waitAsync` is the long-poll form used by the HTTP handlers: it holds no thread while it
/// waits (re-checks run through a caller-given runner, the HTTP worker pool), and at most
/// `maxWaitsPerCredential` of them run at once per credential (docs/http-limits.md,
/// "Long-polls").
public final class EventWaiter: Sendable {
    let log: Logger
    let waiters = Locked<[String: [DispatchSemaphore]]>([:])
    /// Set by `stop`: the ticker ends and every wait still checking finishes at its next check.
    let stopping = Atomic<Bool>(false)
    /// The listener's thread (`start`).
    let listener = NotificationListener()
    /// Concurrent `waitAsync` calls allowed per credential.
    public let maxWaitsPerCredential: Int
    let asyncState = Locked<AsyncState>(AsyncState())
    let tickerStarted = Atomic<Bool>(false)

    /// Asynchronous waiters and the per-credential counts.
    struct AsyncState {
        var byKey: [String: [AsyncWaiter]] = [:]
        var perCredential: [String: Int] = [:]
    }

    /// One pending `waitAsync`; mutable fields only under `asyncState`'s lock.
    final class AsyncWaiter: @unchecked Sendable {
        let key: String
        let credential: String
        let deadline: Date
        let check: @Sendable () throws -> Bool
        let run: @Sendable (@escaping @Sendable () -> Void) -> Void
        let finish: @Sendable (Result<Bool, Error>) -> Void
        var nextCheck: Date
        var checking = false
        var woken = false
        var finished = false

        init(
            key: String, credential: String, deadline: Date, check: @escaping @Sendable () throws -> Bool,
            run: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void, finish: @escaping @Sendable (Result<Bool, Error>) -> Void
        ) {
            self.key = key
            self.credential = credential
            self.deadline = deadline
            self.check = check
            self.run = run
            self.finish = finish
            self.nextCheck = Date().addingTimeInterval(1)
        }
    }

    /// - Parameter maxWaitsPerCredential: concurrent long-polls per credential (≥ 1); default 64.
    public init(log: Logger, maxWaitsPerCredential: Int = 64) {
        self.log = log
        self.maxWaitsPerCredential = max(1, maxWaitsPerCredential)
    }

    /// Starts the listener thread on its own connection to `conninfo`.
    public func start(conninfo: String) {
        listener.start(
            name: "event-waiter", conninfo: conninfo, channel: OperationStore.eventsChannel,
            received: { [self] in for n in $0 { received(payload: n.payload) } },
            lost: { [log] error in log.warning("event listener lost its connection; retrying", ["error": .string("\(error)")]) })
    }

    /// Stops the listener (waits up to 2 s for it).
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        listener.stop()
    }

    /// One notification's payload: wakes each space-separated id in it.
    func received(payload: String) {
        for key in payload.split(separator: " ") { wake(String(key)) }
    }

    func wake(_ key: String) {
        let sems = waiters.withLock { $0[key] ?? [] }
        for s in sems { s.signal() }
        let due = asyncState.withLock { st -> [AsyncWaiter] in
            var out: [AsyncWaiter] = []
            for w in st.byKey[key] ?? [] {
                if w.checking { w.woken = true } else { w.checking = true; out.append(w) }
            }
            return out
        }
        for w in due { recheck(w) }
    }

    /// Long-polls currently waiting for `credential` (for tests and metrics).
    public func waitsInProgress(credential: String) -> Int {
        asyncState.withLock { $0.perCredential[credential] ?? 0 }
    }

    /// Waits without holding a thread until `check()` returns true, it throws, or
    /// `timeoutSeconds` (seconds) pass, re-checking whenever an event for `key` arrives and at
    /// least every second; then calls `finish` once with the last check's result (or its
    /// error). `check` runs through `run` (e.g. `ResponseCompletion.run`, the HTTP worker
    /// pool), never on the caller's or the listener's thread. The first check runs at once.
    ///
    /// Returns false, and does nothing else, when `credential` (a credential id) already has
    /// `maxWaitsPerCredential` waits in progress.
    public func waitAsync(
        for key: String, credential: String, timeoutSeconds: Double,
        run: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void,
        check: @escaping @Sendable () throws -> Bool,
        finish: @escaping @Sendable (Result<Bool, Error>) -> Void
    ) -> Bool {
        let w = AsyncWaiter(
            key: key, credential: credential, deadline: Date().addingTimeInterval(max(0, timeoutSeconds)),
            check: check, run: run, finish: finish)
        let admitted = asyncState.withLock { st -> Bool in
            guard st.perCredential[credential, default: 0] < maxWaitsPerCredential else { return false }
            st.perCredential[credential, default: 0] += 1
            st.byKey[key, default: []].append(w)
            w.checking = true
            return true
        }
        guard admitted else { return false }
        startTicker()
        recheck(w)
        return true
    }

    private func recheck(_ w: AsyncWaiter) {
        w.run { [self] in
            let result = Result { try w.check() }
            let now = Date()
            let final: Bool
            switch result {
            case .success(let ok): final = ok || now >= w.deadline || stopping.load(ordering: .relaxed)
            case .failure: final = true
            }
            let again = asyncState.withLock { st -> Bool in
                if final {
                    remove(w, from: &st)
                    return false
                }
                w.nextCheck = now.addingTimeInterval(1)
                if w.woken { w.woken = false; return true }
                w.checking = false
                return false
            }
            if final { w.finish(result) } else if again { recheck(w) }
        }
    }

    private func remove(_ w: AsyncWaiter, from st: inout AsyncState) {
        guard !w.finished else { return }
        w.finished = true
        st.byKey[w.key]?.removeAll { $0 === w }
        if st.byKey[w.key]?.isEmpty == true { st.byKey[w.key] = nil }
        let n = (st.perCredential[w.credential] ?? 1) - 1
        st.perCredential[w.credential] = n > 0 ? n : nil
    }

    /// The thread that re-checks waits every second and at their deadlines (started on the
    /// first `waitAsync`, stopped by `stop`).
    private func startTicker() {
        guard !tickerStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let t = Thread { [self] in
            while true {
                Thread.sleep(forTimeInterval: 0.05)
                let now = Date()
                let stop = stopping.load(ordering: .relaxed)
                let due = asyncState.withLock { st -> [AsyncWaiter] in
                    var out: [AsyncWaiter] = []
                    for list in st.byKey.values {
                        for w in list where !w.checking && (stop || now >= w.nextCheck || now >= w.deadline) {
                            w.checking = true
                            out.append(w)
                        }
                    }
                    return out
                }
                for w in due { recheck(w) }
                if stop { return }  // every wait still checking finishes at its next check (final once stopping)
            }
        }
        t.name = "event-waiter-ticker"
        t.start()
    }

    /// Waits until `check()` returns true or `timeoutSeconds` pass, re-checking whenever an
    /// event for `key` arrives (and at least every second). Returns the last check's result.
    public func wait(for key: String, timeoutSeconds: Double, check: () throws -> Bool) throws -> Bool {
        if try check() { return true }
        guard timeoutSeconds > 0 else { return false }
        let sem = DispatchSemaphore(value: 0)
        waiters.withLock { $0[key, default: []].append(sem) }
        defer {
            waiters.withLock { w in
                w[key]?.removeAll { $0 === sem }
                if w[key]?.isEmpty == true { w[key] = nil }
            }
        }
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while true {
            if try check() { return true }
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return false }
            _ = sem.wait(timeout: .now() + min(left, 1.0))
        }
    }
}
