import Foundation
import HTTP2
import Locking
import XCTest

/// `HTTP2HandlerThreads`: where an `HTTP2Server` runs its handler, and responses sent later
/// (`HTTP2Response.sendDelaySeconds`) without holding a thread or the connection.
final class HandlerThreadsTests: XCTestCase {
    /// A started server whose handler answers 200 with the request body, after blocking its
    /// thread for the request's `x-block` header (seconds), and sets `sendDelaySeconds` to its
    /// `x-delay` header (seconds).
    func startServer(_ threads: HTTP2HandlerThreads) throws -> HTTP2Server {
        let config = HTTP2ServerConfiguration(
            certificatePEM: TestPKI.shared.server.certificatePEM, privateKeyPEM: TestPKI.shared.server.privateKeyPEM)
        let server = HTTP2Server(configuration: config, handlerThreads: threads) { request in
            if let block = Double(request.header("x-block") ?? "") { Thread.sleep(forTimeInterval: block) }
            var response = HTTP2Response(status: 200, body: request.body)
            response.sendDelaySeconds = Double(request.header("x-delay") ?? "0") ?? 0
            return response
        }
        try server.start()
        return server
    }

    /// Sends a request that blocks its handler for 0.6 s and, 0.1 s later, a quick one on the
    /// same connection; returns the order in which their answers came.
    func answerOrder(_ threads: HTTP2HandlerThreads) throws -> [String] {
        let server = try startServer(threads)
        defer { server.stop() }
        let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port))
        defer { connection.close() }
        let order = Locked<[String]>([])
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            if case .success(let r) = attempt({ try connection.send(HTTP2Request(method: "POST", path: "/b", headers: [("x-block", "0.6")])) }),
                r.status == 200
            {
                order.withLock { $0.append("blocking") }
            }
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.1)
        let quick = try connection.send(HTTP2Request(method: "POST", path: "/q", body: Array("q".utf8)))
        XCTAssertEqual(quick.status, 200)
        XCTAssertEqual(quick.body, Array("q".utf8))
        order.withLock { $0.append("quick") }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        return order.withLock { $0 }
    }

    /// On workers, a blocking handler holds up only its own stream; on the connection's thread
    /// it holds up the connection (which is why only handlers that never block run there).
    func testEachModeRunsTheHandlerWhereItSays() throws {
        XCTAssertEqual(try answerOrder(.workers), ["quick", "blocking"])
        XCTAssertEqual(try answerOrder(.connection), ["blocking", "quick"])
    }

    /// A handler on the connection's thread answers a slow request later, and the same
    /// connection's next request is answered meanwhile: nothing waits for the delay.
    func testADelayedAnswerHoldsUpNeitherItsConnectionNorItsHandler() throws {
        let server = try startServer(.connection)
        defer { server.stop() }
        let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port))
        defer { connection.close() }
        let order = Locked<[String]>([])
        let slowDone = DispatchSemaphore(value: 0)
        let began = Date()
        let slowElapsed = Locked<Double>(0)
        DispatchQueue.global().async {
            let r = attempt { try connection.send(HTTP2Request(method: "POST", path: "/slow", headers: [("x-delay", "1.0")])) }
            slowElapsed.withLock { $0 = Date().timeIntervalSince(began) }
            if case .success(let response) = r, response.status == 200 { order.withLock { $0.append("slow") } }
            slowDone.signal()
        }
        Thread.sleep(forTimeInterval: 0.1)  // the slow request is in flight first
        XCTAssertEqual(try connection.send(HTTP2Request(method: "POST", path: "/fast")).status, 200)
        order.withLock { $0.append("fast") }
        XCTAssertEqual(slowDone.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.withLock { $0 }, ["fast", "slow"], "the fast answer did not wait for the slow one")
        XCTAssertGreaterThanOrEqual(slowElapsed.withLock { $0 }, 1.0, "the slow answer was sent after its delay")
    }

    /// The server's own response-delay fault works in both modes: a client that gives up first
    /// sees a possibly processed request.
    func testTheResponseDelayFaultHoldsTheAnswerInBothModes() throws {
        for mode in [HTTP2HandlerThreads.workers, .connection] {
            let server = try startServer(mode)
            defer { server.stop() }
            server.setFaults(HTTP2ServerFaults(responseDelaySeconds: 1.5))
            let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port, requestTimeout: 0.5))
            defer { connection.close() }
            let r = attempt { try connection.send(HTTP2Request(method: "POST", path: "/slow")) }
            guard case .failure(.possiblyProcessed(let reason)) = r else { return XCTFail("\(mode): \(r)") }
            XCTAssertTrue(reason.contains("timed out"), reason)
        }
    }
}
