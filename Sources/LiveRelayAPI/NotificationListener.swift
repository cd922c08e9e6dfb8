import Dispatch
import Foundation
import Postgres
import Synchronization

/// One background thread that LISTENs on a PostgreSQL channel over its own connection
/// (`PostgresConnection.listenLoop`: notifications in batches, a reconnect every second after a
/// loss) until `stop`. `Authenticator` runs one on `liverelay_auth`, `EventWaiter` one on
/// `liverelay_events` (docs/architecture.md "Processes and their threads").
final class NotificationListener: Sendable {
    private let stopping = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    /// A listener that has not started.
    init() {}

    /// Starts the thread, named `name`, listening on `channel` over a connection to `conninfo`:
    /// `connected` runs after each (re)connect's `LISTEN`, `received` with each batch, `lost`
    /// with the error that dropped the connection (then it waits a second and reconnects).
    /// The callbacks run on the listener's thread. Call at most once.
    func start(
        name: String, conninfo: String, channel: String, connected: @escaping @Sendable () -> Void = {},
        received: @escaping @Sendable ([PostgresNotification]) -> Void, lost: @escaping @Sendable (any Error) -> Void
    ) {
        started.store(true, ordering: .relaxed)
        let t = Thread { [self] in
            defer { done.signal() }
            PostgresConnection.listenLoop(
                conninfo: conninfo, channel: channel, isStopping: { stopping.load(ordering: .relaxed) }, connected: connected,
                received: received, lost: lost)
        }
        t.name = name
        t.start()
    }

    /// Tells the thread to stop and, when it was started, waits for it to end (it notices
    /// within about 0.25 s; the wait gives up after 2 s).
    func stop() {
        stopping.store(true, ordering: .relaxed)
        if started.load(ordering: .relaxed) { _ = done.wait(timeout: .now() + 2) }
    }
}
