import Foundation

/// Worker threads running request handlers, fed by a bounded FIFO queue (docs/http-limits.md,
/// "Worker pool"). libmicrohttpd's polling thread suspends a connection and submits its
/// handler here. `threads` workers always run; when a job arrives and none is idle, another
/// worker starts, up to `maxThreads` (so a few blocking handlers cannot hold up every other
/// request), and such an extra worker exits after 10 s without work. When `capacity` jobs
/// already wait, the request is answered `503 SERVICE_UNAVAILABLE` at once instead of
/// waiting without bound.
///
/// `@unchecked Sendable`: the queue and counters are read and written only under
/// `condition`.
final class HandlerPool: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let threadCount: Int
    let maxThreads: Int
    let capacity: Int
    private let condition = NSCondition()
    private var queue: [Job] = []
    private var head = 0
    private var workers = 0
    private var idle = 0
    private var started = false
    private var stopping = false
    private var nextIndex = 0
    /// Seconds an extra worker (beyond `threadCount`) waits for work before it exits.
    static let extraWorkerIdleSeconds = 10.0
    private let finished = DispatchGroup()

    private let name: String

    /// A pool of `threads` (≥ 1) to `maxThreads` (≥ `threads`) worker threads (started by
    /// `start`); at most `capacity` (≥ 1) jobs wait for one.
    init(threads: Int, maxThreads: Int, capacity: Int, name: String = "http-worker") {
        threadCount = max(1, threads)
        self.maxThreads = max(threadCount, maxThreads)
        self.capacity = max(1, capacity)
        self.name = name
    }

    /// Starts the core worker threads (once).
    func start() {
        condition.lock()
        defer { condition.unlock() }
        guard !started else { return }
        started = true
        for _ in 0..<threadCount { spawnLocked() }
    }

    /// Worker threads running now (for tests and metrics).
    var workerCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return workers
    }

    private func spawnLocked() {
        workers += 1
        finished.enter()
        let index = nextIndex
        nextIndex += 1
        let t = Thread { [self] in
            runLoop()
            finished.leave()
        }
        t.name = "\(name)-\(index)"
        t.stackSize = 2 << 20
        t.start()
    }

    /// Jobs waiting for a worker.
    var queued: Int {
        condition.lock()
        defer { condition.unlock() }
        return queue.count - head
    }

    /// Queues `job`. Returns false (job not queued) when `capacity` jobs already wait and
    /// `force` is false, or when the pool is stopping. `force` is for the second half of a
    /// request that already holds a connection (a deferred response), which must not be lost.
    @discardableResult
    func submit(force: Bool = false, _ job: @escaping Job) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopping, started, force || queue.count - head < capacity else { return false }
        queue.append(job)
        if idle <= queue.count - head - 1, workers < maxThreads { spawnLocked() }
        condition.signal()
        return true
    }

    /// Lets queued jobs finish, then stops every worker and waits for them (a job still
    /// running is waited for, never abandoned).
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
        finished.wait()
    }

    private func runLoop() {
        condition.lock()
        while true {
            while head == queue.count && !stopping {
                idle += 1
                let expired = !condition.wait(until: Date().addingTimeInterval(Self.extraWorkerIdleSeconds))
                idle -= 1
                if expired, head == queue.count, workers > threadCount, !stopping {
                    workers -= 1
                    condition.unlock()
                    return
                }
            }
            if head == queue.count {  // stopping and nothing left
                workers -= 1
                condition.unlock()
                return
            }
            let job = queue[head]
            head += 1
            if head > 1024, head * 2 > queue.count {
                queue.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job()
            condition.lock()
        }
    }
}
