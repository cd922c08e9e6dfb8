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

    /// Sends a slow request (`slow`: its one extra header, `x-block` or `x-delay`) and, 0.1 s
    /// later, a quick one on the same connection; returns the order in which their answers came
    /// and the seconds the slow one took.
    func answerOrder(_ threads: HTTP2HandlerThreads, slow: (String, String)) throws -> (order: [String], slowSeconds: Double) {
        let server = try startServer(threads)
        defer { server.stop() }
        let connection = try HTTP2Connection(configuration: clientConfiguration(port: server.port))
        defer { connection.close() }
        let order = Locked<[String]>([])
        let slowSeconds = Locked<Double>(0)
        let done = DispatchSemaphore(value: 0)
        let began = Date()
        DispatchQueue.global().async {
            let r = attempt { try connection.send(HTTP2Request(method: "POST", path: "/slow", headers: [slow])) }
            slowSeconds.withLock { $0 = Date().timeIntervalSince(began) }
            if case .success(let response) = r, response.status == 200 { order.withLock { $0.append("slow") } }
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.1)  // the slow request is in flight first
        let quick = try connection.send(HTTP2Request(method: "POST", path: "/q", body: Array("q".utf8)))
        XCTAssertEqual(quick.status, 200)
        XCTAssertEqual(quick.body, Array("q".utf8))
        order.withLock { $0.append("quick") }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        return (order.withLock { $0 }, slowSeconds.withLock { $0 })
    }

    /// On workers, a blocking handler holds up only its own stream; on the connection's thread
    /// it holds up the connection (which is why only handlers that never block run there).
    func testABlockingHandlerHoldsUpItsConnectionOnlyOnTheConnectionThread() throws {
        XCTAssertEqual(try answerOrder(.workers, slow: ("x-block", "0.6")).order, ["quick", "slow"])
        XCTAssertEqual(try answerOrder(.connection, slow: ("x-block", "0.6")).order, ["slow", "quick"])
    }

    /// In both modes a handler's answer with `sendDelaySeconds` is sent after the delay, and the
    /// same connection's next request is answered meanwhile: nothing waits for the delay.
    func testADelayedAnswerHoldsUpNeitherItsConnectionNorItsHandler() throws {
        for mode in [HTTP2HandlerThreads.workers, .connection] {
            let (order, slowSeconds) = try answerOrder(mode, slow: ("x-delay", "1.0"))
            XCTAssertEqual(order, ["quick", "slow"], "\(mode): the quick answer did not wait for the slow one")
            XCTAssertGreaterThanOrEqual(slowSeconds, 1.0, "\(mode): the slow answer was sent after its delay")
        }
    }

    /// The server's own response-delay fault holds the answer in both modes: a client that gives
    /// up first sees a possibly processed request, and a patient one gets the answer after the
    /// delay.
    func testTheResponseDelayFaultHoldsTheAnswerInBothModes() throws {
        for mode in [HTTP2HandlerThreads.workers, .connection] {
            let server = try startServer(mode)
            defer { server.stop() }
            server.setFaults(HTTP2ServerFaults(responseDelaySeconds: 1.5))
            let impatient = try HTTP2Connection(configuration: clientConfiguration(port: server.port, requestTimeout: 0.5))
            defer { impatient.close() }
            let r = attempt { try impatient.send(HTTP2Request(method: "POST", path: "/slow")) }
            if case .failure(.possiblyProcessed(let reason)) = r {
                XCTAssertTrue(reason.contains("timed out"), "\(mode): \(reason)")
            } else {
                XCTFail("\(mode): \(r)")
            }
            let patient = try HTTP2Connection(configuration: clientConfiguration(port: server.port, requestTimeout: 10))
            defer { patient.close() }
            let began = Date()
            XCTAssertEqual(try patient.send(HTTP2Request(method: "POST", path: "/slow", body: Array("p".utf8))).body, Array("p".utf8))
            XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(began), 1.5, "\(mode): answered after the delay")
        }
    }
}
