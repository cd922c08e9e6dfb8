import Foundation

/// Threads for server handlers, which may block (docs/ sandbox delays, slow handlers).
/// Dispatch's global queues on Linux do not add threads when work blocks (they are capped at
/// the CPU count), so blocking handlers there would serialize. This pool starts a new thread
/// whenever work arrives and no worker is idle, up to `maxThreads`; idle workers exit after
/// `idleSeconds`. `@unchecked Sendable`: all state is guarded by `condition`.
final class WorkerPool: @unchecked Sendable {
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
    private var idle = 0
    private var threads = 0
    private let maxThreads: Int
    private let idleSeconds: Double
    private let name: String

    init(name: String, maxThreads: Int = 512, idleSeconds: Double = 10) {
        self.name = name
        self.maxThreads = maxThreads
        self.idleSeconds = idleSeconds
    }

    /// Runs `work` on a worker thread (queued FIFO when `maxThreads` are all busy).
    func submit(_ work: @escaping @Sendable () -> Void) {
        condition.lock()
        queue.append(work)
        let spawn = idle == 0 && threads < maxThreads
        if spawn { threads += 1 }
        condition.signal()
        condition.unlock()
        if spawn {
            let thread = Thread { self.workerLoop() }
            thread.name = name
            thread.start()
        }
    }

    private func workerLoop() {
        condition.lock()
        while true {
            if queue.isEmpty {
                idle += 1
                let woke = condition.wait(until: Date(timeIntervalSinceNow: idleSeconds))
                idle -= 1
                if !woke && queue.isEmpty {
                    threads -= 1
                    condition.unlock()
                    return
                }
                continue
            }
            let work = queue.removeFirst()
            condition.unlock()
            work()
            condition.lock()
        }
    }
}
