#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a POSIX mutex: the project's lock for state shared between threads, used
/// instead of `Synchronization.Mutex`.
///
/// Why not `Mutex`: on Linux the toolchain's `Mutex` is built on raw futex system calls that
/// ThreadSanitizer does not see, so every access made inside one `withLock` closure looked
/// unsynchronized with the next and `deploy/local/tsan` drowned in false reports. `Locked`
/// takes a `pthread_mutex_t` (IEEE Std 1003.1, "pthread_mutex_lock, pthread_mutex_trylock,
/// pthread_mutex_unlock - lock and unlock a mutex"), which ThreadSanitizer intercepts, so the
/// happens-before edge of each lock/unlock pair is visible to it and a report about state behind
/// a `Locked` points at a real race.
/// `Atomic` stays as it is (ThreadSanitizer models atomics).
///
/// Shape: `withLock(_:)` is the one way to reach the value, as in `Mutex.withLock` (Apple
/// Developer Documentation, "Mutex"): the closure gets the value `inout`, may throw (the error
/// passes through, the lock is released either way) and its result is returned. A class, so
/// closures and objects share one lock by reference. The mutex and the value each live in their
/// own heap allocation, released in `deinit`: a Swift stored `pthread_mutex_t` may be moved, and
/// a stored value of a zero-sized type (`Locked(())`) is tracked at the object's own address,
/// where ThreadSanitizer paired the exclusivity check inside the lock with the unlocked read of
/// the object's header before it (a false "Swift access race").
/// Not recursive: `withLock` inside a `withLock` of the same instance is a programming error and
/// traps (the mutex is `PTHREAD_MUTEX_ERRORCHECK`), where `Mutex` would also trap.
///
/// Thread safety: `@unchecked Sendable` because `value.pointee` is read and written only between
/// `pthread_mutex_lock` and `pthread_mutex_unlock` of `mutex`; values go in and out as `sending`,
/// as with `Mutex`, so a non-`Sendable` value cannot stay reachable from outside.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let value: UnsafeMutablePointer<Value>

    /// A lock holding `initialValue`.
    public init(_ initialValue: sending Value) {
        value = .allocate(capacity: 1)
        value.initialize(to: initialValue)
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
        let status = pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` with exclusive access to the value and returns its result; rethrows what
    /// `body` throws (typed). Blocks while another thread holds the lock; traps when the calling
    /// thread already holds it.
    public func withLock<Result, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        let status = pthread_mutex_lock(mutex)
        precondition(status == 0, "pthread_mutex_lock failed: \(status) (recursive withLock?)")
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
