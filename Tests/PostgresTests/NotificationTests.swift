import Foundation
import XCTest
@testable import Postgres
import LiveRelayTestSupport

/// LISTEN/NOTIFY delivery, timeout, and a lost server while waiting.
final class NotificationTests: XCTestCase {
    private var listener: PostgresConnection!
    private var sender: PostgresConnection!

    override func setUpWithError() throws {
        let url = try TestDatabase.baseURL()
        listener = try PostgresConnection(url)
        sender = try PostgresConnection(url)
    }

    override func tearDown() {
        listener?.close()
        sender?.close()
    }

    func testNotifyIsDeliveredWithChannelPayloadAndPID() throws {
        let channel = "lr \"test\" ünï \(UUID().uuidString)"
        try listener.listen(channel)
        try sender.notify(channel, payload: "hello, 'world' 🌍")
        let notes = try listener.waitForNotifications(timeoutSeconds: 5)
        XCTAssertEqual(notes, [PostgresNotification(channel: channel, payload: "hello, 'world' 🌍", pid: sender.backendPID)])
    }

    func testNotifyInsideTransactionArrivesAtCommitInOrder() throws {
        let channel = "lr_tx_\(UUID().uuidString)"
        try listener.listen(channel)
        try sender.transaction { connection in
            try connection.notify(channel, payload: "1")
            try connection.notify(channel, payload: "2")
            XCTAssertEqual(try listener.waitForNotifications(timeoutSeconds: 0.2), [], "delivered before COMMIT")
        }
        var payloads: [String] = []
        while payloads.count < 2 {
            let notes = try listener.waitForNotifications(timeoutSeconds: 5)
            XCTAssertFalse(notes.isEmpty, "timed out")
            if notes.isEmpty { break }
            payloads += notes.map(\.payload)
        }
        XCTAssertEqual(payloads, ["1", "2"])
    }

    func testWaitReturnsEmptyOnTimeout() throws {
        try listener.listen("lr_quiet_\(UUID().uuidString)")
        let started = Date()
        XCTAssertEqual(try listener.waitForNotifications(timeoutSeconds: 0.3), [])
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.28)
        XCTAssertLessThan(elapsed, 2.0)
        XCTAssertTrue(listener.isHealthy)
    }

    func testWaitThrowsConnectionErrorWhenServerGoesAway() throws {
        _ = try TestDatabase.adminURL()
        try listener.listen("lr_doomed")
        try terminateBackend(listener.backendPID)
        let started = Date()
        assertPostgresError(.connection) { try listener.waitForNotifications(timeoutSeconds: 5) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2.0)
        XCTAssertFalse(listener.isHealthy)
    }
}
