import Foundation
import XCTest
import Logging

@testable import LiveRelayApp

/// `ServiceGroup` (Sources/LiveRelayApp/ServiceGroup.swift) without I/O: services start in order
/// and stop in reverse, a failing start stops the started ones in reverse and rethrows, and each
/// stop is logged with its name.
final class ServiceGroupTests: XCTestCase {
    /// A record of what the services did, in order ("start a", "stop a", "wait" …).
    private let events = LockedBox<[String]>([])
    /// The log lines written through the group's logger.
    private let lines = LockedBox<[String]>([])

    /// The error a failing test service throws from `start`.
    private struct StartRefused: Error, Equatable { let service: String }

    private func record(_ event: String) { events.set(events.get() + [event]) }

    private func service(_ name: String, failing: Bool = false) -> any Service {
        ClosureService(
            name,
            start: { [self] in
                record("start \(name)")
                if failing { throw StartRefused(service: name) }
            }, stop: { [self] in record("stop \(name)") })
    }

    private func group(_ services: [any Service]) -> ServiceGroup {
        let lines = self.lines
        let log = Logger(minimum: .info, sink: { line in lines.set(lines.get() + [line]) })
        return ServiceGroup(services, log: log) { [self] in
            record("wait")
            return "SIGTERM"
        }
    }

    /// The logged lines as JSON objects.
    private func logged() throws -> [[String: Any]] {
        try lines.get().map { line in
            try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
        }
    }

    func testRunStartsInOrderWaitsThenStopsInReverse() throws {
        try group([service("database"), service("dispatcher"), service("api")]).run { record("running") }
        XCTAssertEqual(
            events.get(),
            ["start database", "start dispatcher", "start api", "running", "wait", "stop api", "stop dispatcher", "stop database"])
    }

    func testFailingStartStopsTheStartedOnesInReverseAndRethrows() {
        let g = group([service("database"), service("push sender"), service("api", failing: true), service("maintenance")])
        XCTAssertThrowsError(try g.run { record("running") }) { error in
            XCTAssertEqual(error as? StartRefused, StartRefused(service: "api"))
        }
        XCTAssertEqual(events.get(), ["start database", "start push sender", "start api", "stop push sender", "stop database"])
    }

    func testFirstStartFailingStopsNothing() {
        let g = group([service("database", failing: true), service("api")])
        XCTAssertThrowsError(try g.start())
        XCTAssertEqual(events.get(), ["start database"])
    }

    func testStopIsLoggedPerServiceInStopOrderAndASecondStopDoesNothing() throws {
        let g = group([service("database"), service("api")])
        try g.start()
        g.stop()
        g.stop()
        XCTAssertEqual(events.get(), ["start database", "start api", "stop api", "stop database"])
        let stopped = try logged().filter { $0["msg"] as? String == "service stopped" }
        XCTAssertEqual(stopped.compactMap { $0["service"] as? String }, ["api", "database"])
        XCTAssertEqual(stopped.compactMap { $0["seconds"] as? Double }.count, 2, "\(stopped)")
    }

    func testRunLogsTheShutdownMessageWithTheSignal() throws {
        try group([service("sandbox")]).run(shutdownMessage: "sandbox stopping")
        let shutdown = try logged().filter { $0["msg"] as? String == "sandbox stopping" }
        XCTAssertEqual(shutdown.compactMap { $0["signal"] as? String }, ["SIGTERM"])
    }
}
