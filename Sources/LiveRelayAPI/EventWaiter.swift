import Dispatch
import Foundation
import LiveRelayStore
import Logging
import Postgres
import Synchronization

/// Wakes requests that wait for something another node may cause (SPEC §4
/// `wait_until_ready_ms`, §5 `wait_ms`): one LISTEN connection per process on
/// `OperationStore.eventsChannel`; payloads are target or operation ids. Waiters re-check
/// the database after each wake-up, so a missed notification only costs the 1 s re-check
/// interval, never correctness. No sleep loops on the request path.
public final class EventWaiter: Sendable {
    let log: Logger
    let waiters = Mutex<[String: [DispatchSemaphore]]>([:])
    let stopping = Atomic<Bool>(false)
    let done = DispatchSemaphore(value: 0)
    let started = Atomic<Bool>(false)

    public init(log: Logger) { self.log = log }

    /// Starts the listener thread on its own connection to `conninfo`.
    public func start(conninfo: String) {
        started.store(true, ordering: .relaxed)
        let t = Thread { [self] in
            defer { done.signal() }
            var conn: PostgresConnection?
            while !stopping.load(ordering: .relaxed) {
                do {
                    if conn == nil {
                        let c = try PostgresConnection(conninfo)
                        try c.listen(OperationStore.eventsChannel)
                        conn = c
                    }
                    for n in try conn!.waitForNotifications(timeoutSeconds: 0.25) { wake(n.payload) }
                } catch {
                    conn?.close()
                    conn = nil
                    log.warning("event listener lost its connection; retrying", ["error": .string("\(error)")])
                    Thread.sleep(forTimeInterval: 1)
                }
            }
            conn?.close()
        }
        t.name = "event-waiter"
        t.start()
    }

    /// Stops the listener (waits up to 2 s for it).
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        if started.load(ordering: .relaxed) { _ = done.wait(timeout: .now() + 2) }
    }

    func wake(_ key: String) {
        let sems = waiters.withLock { $0[key] ?? [] }
        for s in sems { s.signal() }
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
