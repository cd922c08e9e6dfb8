import Foundation
import HTTPServer
import Metrics
import XCTest
import LiveRelayTestSupport

/// A server on an ephemeral port with a captured log.
struct RunningServer {
    let server: HTTPServer
    let log: LineCapture
    let metrics: MetricsRegistry
    var port: Int { server.port }
}

extension XCTestCase {
    func startServer(_ configure: (Router) -> Void, configuration: HTTPServerConfiguration = .init(port: 0, threads: 4)) throws -> RunningServer {
        let router = Router()
        configure(router)
        let log = LineCapture()
        let metrics = MetricsRegistry()
        let server = HTTPServer(configuration: configuration, router: router, metrics: metrics, log: log.write)
        try server.start()
        addTeardownBlock { server.shutdown(drainTimeoutSeconds: 1) }
        return RunningServer(server: server, log: log, metrics: metrics)
    }
}
