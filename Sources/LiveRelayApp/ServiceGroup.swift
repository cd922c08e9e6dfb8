import Foundation
import Logging

/// A part of a long-running process (`serve`, `api`, `worker`, `sandbox`) that is started once
/// and stopped once: a listener, a pool of worker threads, a connection pool
/// (docs/architecture.md "Processes and their threads").
///
/// Not `Sendable`: a `ServiceGroup` starts and stops its services on the one thread that runs
/// the command.
protocol Service {
    /// Short, stable name used in the stop log (`"api"`, `"dispatcher"` …).
    var name: String { get }

    /// Starts the service's threads or listeners. Called once, before any service after it.
    /// - Throws: whatever keeps it from running (e.g. `HTTPServerError` when a port cannot be
    ///   bound); nothing of it is left running then.
    func start() throws

    /// Stops it, waiting for the work it holds as long as the component needs (each adapter
    /// keeps the drain timeout its command used before: the API 30 s, the dispatcher 20 s …).
    /// Called once, only after a successful `start`, after every service started after it
    /// has stopped.
    func stop()
}

/// A `Service` made of two closures: the adapter the commands wrap their existing components in
/// (`Dispatcher`, `HTTPServer`, `MaintenanceService` …) without changing them.
struct ClosureService: Service {
    let name: String
    private let startBody: () throws -> Void
    private let stopBody: () -> Void

    /// - Parameters:
    ///   - start: starts the component; the default does nothing, for a component that is running
    ///     once it is made (the pool, the push sender) and whose stop the group owns.
    ///   - stop: stops it, with the timeout it needs.
    init(_ name: String, start: @escaping () throws -> Void = {}, stop: @escaping () -> Void) {
        self.name = name
        startBody = start
        stopBody = stop
    }

    func start() throws { try startBody() }
    func stop() { stopBody() }
}

/// Services started in order and stopped in reverse (LIFO), as a process runs them from start to
/// SIGTERM: a service may rely on every service before it while it runs and while it stops
/// (the dispatcher on the pool, the API server on its listeners).
///
/// If a start throws, the services already started are stopped in reverse and the error is
/// rethrown. Each stop is logged at `info` as `service stopped` with `service` (its name) and
/// `seconds` (how long its stop took, wall clock).
///
/// Not `Sendable`: owned by the thread that runs the command.
final class ServiceGroup {
    private let services: [any Service]
    private let log: Logger
    private let waitForTermination: () -> String
    private var started: [any Service] = []

    /// - Parameters:
    ///   - services: in start order.
    ///   - log: where the stops are logged.
    ///   - waitForTermination: blocks until the process should stop and returns why (a signal
    ///     name); by default SIGTERM/SIGINT through `ServeCommand.waitForTermination`, whose
    ///     handling the commands install with `ServeCommand.prepareForTermination` before
    ///     anything starts.
    init(_ services: [any Service], log: Logger, waitForTermination: @escaping () -> String = ServeCommand.waitForTermination) {
        self.services = services
        self.log = log
        self.waitForTermination = waitForTermination
    }

    /// Starts every service in order.
    /// - Throws: the first start's error, after the services started before it were stopped in
    ///   reverse order.
    func start() throws {
        for service in services {
            do {
                try service.start()
            } catch {
                stop()
                throw error
            }
            started.append(service)
        }
    }

    /// Stops the started services in reverse start order, logging each (name, seconds). A
    /// second call stops nothing.
    func stop() {
        while let service = started.popLast() {
            let began = ContinuousClock.now
            service.stop()
            let took = ContinuousClock.now - began
            let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
            log.info("service stopped", ["service": .string(service.name), "seconds": .double((seconds * 1000).rounded() / 1000)])
        }
    }

    /// The life of a process: `start`, then `running` (the "listening" log line, the sandbox's
    /// banner), then blocks in `waitForTermination`, logs `shutdownMessage` with the returned
    /// `signal`, and `stop`s.
    /// - Throws: a start's error (see `start`); `running` is not called then.
    func run(shutdownMessage: String = "shutting down", running: () -> Void = {}) throws {
        try start()
        running()
        let signal = waitForTermination()
        log.info(shutdownMessage, ["signal": .string(signal)])
        stop()
    }
}
