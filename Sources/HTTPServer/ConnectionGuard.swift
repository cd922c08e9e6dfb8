import CShims
import Foundation
import Locking
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What the server tracks about one open connection (docs/http-limits.md, "Read deadline").
/// Mutated only under `ConnectionGuard.connections`' lock.
final class ConnectionState: @unchecked Sendable {
    /// The socket (owned by libmicrohttpd; only ever `shutdown(2)`, never closed, here).
    let fd: Int32
    /// `tcpi_bytes_received` when the connection last became idle (opened, or a response done).
    var baselineBytes: UInt64 = 0
    /// When the request being read began (first byte seen, or its request line parsed); nil
    /// while the connection is idle between requests.
    var requestStarted: ContinuousClock.Instant?
    /// True while the request is fully read and its handler runs (no read deadline then).
    var handling = false
    /// Set once the deadline cut the connection off.
    var cut = false
    /// Bumped whenever the connection becomes idle again (so a sweep's unlocked byte-count
    /// read is applied only to the idle period it was taken in).
    var idleGeneration = 0

    init(fd: Int32) { self.fd = fd }
}

/// Open connections and the absolute read deadline: a request must be read completely —
/// request line, headers and body — within `deadlineSeconds` of its first byte, however
/// slowly the bytes trickle in (libmicrohttpd's own idle timeout is reset by every byte, so a
/// slowloris client never meets it). A sweep thread looks at every connection each
/// `sweepSeconds` (0.5 s): a connection idle between requests whose kernel byte count
/// (`TCP_INFO tcpi_bytes_received`) grew has started a request; one past its deadline is
/// `shutdown(2)` (libmicrohttpd then sees end-of-stream and closes it). Precision: the
/// deadline is met within one sweep interval.
///
/// libmicrohttpd reports a connection closed before it closes the socket, and the registry
/// lock is held across the sweep, so a descriptor is never shut down after it was reused.
final class ConnectionGuard: Sendable {
    let deadlineSeconds: Double
    let sweepSeconds: Double
    let connections = Locked<[ObjectIdentifier: ConnectionState]>([:])
    let count = Atomic<Int>(0)
    let cutOff = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let wakeUp = DispatchSemaphore(value: 0)
    private let running = Atomic<Bool>(false)
    private let onCut: @Sendable (Int) -> Void

    /// - Parameters:
    ///   - deadlineSeconds: seconds allowed to read one request (≤ 0 disables the deadline).
    ///   - sweepSeconds: interval between sweeps, in seconds.
    ///   - onCut: called (outside the lock) with the number of connections a sweep cut off.
    init(deadlineSeconds: Double, sweepSeconds: Double = 0.5, onCut: @escaping @Sendable (Int) -> Void) {
        self.deadlineSeconds = deadlineSeconds
        self.sweepSeconds = max(0.01, sweepSeconds)
        self.onCut = onCut
    }

    func start() {
        running.store(true, ordering: .relaxed)
        let t = Thread { [self] in
            defer { done.signal() }
            while !stopping.load(ordering: .relaxed) {
                _ = wakeUp.wait(timeout: .now() + sweepSeconds)
                if stopping.load(ordering: .relaxed) { break }
                let n = sweep(now: .now)
                if n > 0 { onCut(n) }
            }
        }
        t.name = "http-read-deadline"
        t.start()
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        guard running.load(ordering: .relaxed) else { return }
        wakeUp.signal()
        _ = done.wait(timeout: .now() + 2)
    }

    func opened(_ state: ConnectionState) {
        connections.withLock { $0[ObjectIdentifier(state)] = state }
        count.add(1, ordering: .relaxed)
    }

    func closed(_ state: ConnectionState) {
        connections.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(state)) }
        count.subtract(1, ordering: .relaxed)
    }

    /// The request line of a new request was parsed (its deadline starts now at the latest).
    func requestBegan(_ state: ConnectionState) {
        connections.withLock { _ in
            if state.requestStarted == nil { state.requestStarted = .now }
            state.handling = false
        }
    }

    /// The request is completely read; its handler runs now.
    func requestRead(_ state: ConnectionState) {
        connections.withLock { _ in state.handling = true }
    }

    /// The response was sent (or the request failed): the connection is idle again.
    func requestFinished(_ state: ConnectionState) {
        var bytes: UInt64 = 0
        let known = lr_tcp_bytes_received(state.fd, &bytes) == 0
        connections.withLock { _ in
            state.handling = false
            state.requestStarted = nil
            state.idleGeneration += 1
            if known { state.baselineBytes = bytes }
        }
    }

    /// One pass: starts deadlines of connections that received bytes, cuts off those past
    /// theirs. Returns how many it cut off. The kernel byte counts are read outside the lock
    /// (the polling thread takes it for every request), `shutdown` only under it.
    func sweep(now: ContinuousClock.Instant) -> Int {
        guard deadlineSeconds > 0 else { return 0 }
        let limit = Duration.milliseconds(Int64(deadlineSeconds * 1000))
        var cut = 0
        var idle: [(ConnectionState, Int32, UInt64, Int)] = []
        connections.withLock { all in
            idle.reserveCapacity(all.count)
            for state in all.values where !state.handling && !state.cut {
                if let started = state.requestStarted {
                    if now - started > limit {
                        state.cut = true
                        _ = shutdown(state.fd, Int32(SHUT_RDWR))
                        cut += 1
                    }
                } else {
                    idle.append((state, state.fd, state.baselineBytes, state.idleGeneration))
                }
            }
        }
        var started: [(ConnectionState, Int)] = []
        for (state, fd, baseline, generation) in idle {
            var bytes: UInt64 = 0
            if lr_tcp_bytes_received(fd, &bytes) == 0, bytes > baseline { started.append((state, generation)) }
        }
        if !started.isEmpty {
            connections.withLock { all in
                for (state, generation) in started
                where all[ObjectIdentifier(state)] === state
                    && state.idleGeneration == generation && state.requestStarted == nil && !state.handling
                {
                    state.requestStarted = now
                }
            }
        }
        if cut > 0 { cutOff.add(cut, ordering: .relaxed) }
        return cut
    }
}
