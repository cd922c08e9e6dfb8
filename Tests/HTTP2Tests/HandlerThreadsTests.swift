import Foundation
import HTTP2
import Locking
import XCTest

/// `HTTP2HandlerThreads`: where an `HTTP2Server` runs its handler, and responses sent later
/// (`HTTP2Response.sendDelaySeconds`) without holding a thread or the connection.
final class HandlerThreadsTests: XCTestCase {
    /// A started server whose handler answers 200 with the request body, after blocking its
    /// thread for the request's `x-block` header (seconds), and sets `sendDelaySeconds` to its
    /// `x-delay` header (seconds). For a request to `/slow`, it signals `slowArrived` as it
    /// begins and stores in `slowReturned` the time it returns.
    func startServer(
        _ threads: HTTP2HandlerThreads, slowArrived: DispatchSemaphore? = nil, slowReturned: Locked<Date?>? = nil
    ) throws -> HTTP2Server {
        let config = HTTP2ServerConfiguration(
            certificatePEM: TestPKI.shared.server.certificatePEM, privateKeyPEM: TestPKI.shared.server.privateKeyPEM)
        let server = HTTP2Server(configuration: config, handlerThreads: threads) { request in
            let slow = request.path == "/slow"
            if slow { slowArrived?.signal() }
            if let block = Double(request.header("x-block") ?? "") { Thread.sleep(forTimeInterval: block) }
            var response = HTTP2Response(status: 200, body: request.body)
            response.sendDelaySeconds = Double(request.header("x-delay") ?? "0") ?? 0
            if slow { slowReturned?.withLock { $0 = Date() } }
            return response
        }
        try server.start()
        return server
    }

    /// Sends a slow request (`slow`: its one extra header, `x-block` or `x-delay`) and, once its
    /// handler has begun, a quick one on the same connection. Returns the order in which their
    /// answers came, the seconds the slow one took, and whether the quick answer arrived before
    /// the slow request's handler returned (a server-side time: unlike the order of two client
    /// threads, it cannot flip under load).
    func answerOrder(
        _ threads: HTTP2HandlerThreads, slow: (String, String)
    ) throws -> (order: [String], slowSeconds: Double, quickBeforeSlowHandlerReturned: Bool) {
        let arrived = DispatchSemaphore(value: 0)
        let returned = Locked<Date?>(nil)
        let server = try startServer(threads, slowArrived: arrived, slowReturned: returned)
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
        // The slow request's handler has begun before the quick request is sent (a fixed 0.1 s
        // sleep here let a loaded machine send the quick one first).
        XCTAssertEqual(arrived.wait(timeout: .now() + 10), .success, "the slow request reached its handler")
        let quick = try connection.send(HTTP2Request(method: "POST", path: "/q", body: Array("q".utf8)))
        let quickAnswered = Date()
        XCTAssertEqual(quick.status, 200)
        XCTAssertEqual(quick.body, Array("q".utf8))
        order.withLock { $0.append("quick") }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let slowReturned = try XCTUnwrap(returned.withLock { $0 }, "the slow request's handler returned")
        return (order.withLock { $0 }, slowSeconds.withLock { $0 }, quickAnswered < slowReturned)
    }

    /// On workers, a blocking handler holds up only its own stream; on the connection's thread
    /// it holds up the connection (which is why only handlers that never block run there). Told
    /// by when the quick answer arrived against when the slow handler returned.
    func testABlockingHandlerHoldsUpItsConnectionOnlyOnTheConnectionThread() throws {
        XCTAssertTrue(
            try answerOrder(.workers, slow: ("x-block", "0.6")).quickBeforeSlowHandlerReturned,
            "on workers the quick request is answered while the slow handler blocks")
        XCTAssertFalse(
            try answerOrder(.connection, slow: ("x-block", "0.6")).quickBeforeSlowHandlerReturned,
            "on the connection's thread the quick request waits for the slow handler")
    }

    /// In both modes a handler's answer with `sendDelaySeconds` is sent after the delay, and the
    /// same connection's next request is answered meanwhile: nothing waits for the delay.
    func testADelayedAnswerHoldsUpNeitherItsConnectionNorItsHandler() throws {
        for mode in [HTTP2HandlerThreads.workers, .connection] {
            let (order, slowSeconds, _) = try answerOrder(mode, slow: ("x-delay", "1.0"))
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
