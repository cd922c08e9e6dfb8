import Foundation
import HTTPServer
import Metrics
import Synchronization
import XCTest

/// Collects log lines written by the server (from its worker threads).
final class LogSink: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    var write: @Sendable (String) -> Void { { [self] line in lines.withLock { $0.append(line) } } }
}

/// A server on an ephemeral port with a captured log.
struct RunningServer {
    let server: HTTPServer
    let log: LogSink
    let metrics: MetricsRegistry
    var port: Int { server.port }
}

extension XCTestCase {
    func startServer(_ configure: (Router) -> Void, configuration: HTTPServerConfiguration = .init(port: 0, threads: 4)) throws -> RunningServer {
        let router = Router()
        configure(router)
        let log = LogSink()
        let metrics = MetricsRegistry()
        let server = HTTPServer(configuration: configuration, router: router, metrics: metrics, log: log.write)
        try server.start()
        addTeardownBlock { server.shutdown(drainTimeoutSeconds: 1) }
        return RunningServer(server: server, log: log, metrics: metrics)
    }
}
