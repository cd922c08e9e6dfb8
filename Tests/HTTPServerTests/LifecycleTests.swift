import Foundation
import HTTPServer
import Locking
import XCTest

final class LifecycleTests: XCTestCase {
    final class Outcome: Sendable {
        let value = Locked<Result<RawResponse, Error>?>(nil)
    }

    func testShutdownDrainsInFlightRequestAndRefusesNewConnections() throws {
        let entered = DispatchSemaphore(value: 0)
        let s = try startServer { router in
            router.add("GET", "/slow") { _ in
                entered.signal()
                Thread.sleep(forTimeInterval: 1)
                return .text(200, "done")
            }
        }
        let port = s.port
        let outcome = Outcome()
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let result = Result { try RawHTTPClient.request(port: port, method: "GET", path: "/slow") }
            outcome.value.withLock { $0 = result }
            finished.signal()
        }
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(s.server.inFlight, 1)

        let stopped = DispatchSemaphore(value: 0)
        let server = s.server
        let began = ContinuousClock.now
        Thread.detachNewThread {
            server.shutdown(drainTimeoutSeconds: 10)
            stopped.signal()
        }
        // While draining, a new connection must be refused (not queued in the backlog).
        var refused = false
        for _ in 0..<200 where !refused {
            do { close(try RawHTTPClient.connect(port: port)); usleep(5_000) } catch let e as RawHTTPError { refused = e.errno == ECONNREFUSED }
        }
        XCTAssertTrue(refused, "new connections refused during drain")
        XCTAssertEqual(stopped.wait(timeout: .now() + 15), .success)
        XCTAssertEqual(finished.wait(timeout: .now() + 5), .success)
        let response = try XCTUnwrap(outcome.value.withLock { $0 }).get()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.text, "done")
        XCTAssertEqual(server.inFlight, 0)
        XCTAssertLessThan(ContinuousClock.now - began, .seconds(5))
        XCTAssertThrowsError(try RawHTTPClient.connect(port: port)) { error in
            XCTAssertEqual((error as? RawHTTPError)?.errno, ECONNREFUSED)
        }
    }

    func testStartFailsClearlyWhenPortTaken() throws {
        let s = try startServer { _ in }
        let second = HTTPServer(configuration: .init(port: s.port), router: Router(), log: { _ in })
        XCTAssertThrowsError(try second.start()) { error in
            let e = error as? HTTPServerError
            XCTAssertEqual(e?.errno, EADDRINUSE)
            XCTAssertTrue(e?.message.contains("Address already in use") ?? false, "\(error)")
        }
        XCTAssertThrowsError(try s.server.start(), "second start is refused")
    }

    func testLocalhostAndIdleShutdown() throws {
        let s = try startServer(
            { router in router.add("GET", "/h") { _ in .text(200, "ok") } },
            configuration: .init(host: "localhost", port: 0, threads: 2))
        XCTAssertGreaterThan(s.port, 0)
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "GET", path: "/h").status, 200)
        XCTAssertEqual(try RawHTTPClient.request(port: s.port, method: "HEAD", path: "/h").status, 200)
        s.server.shutdown(drainTimeoutSeconds: 1)
        s.server.shutdown()  // idempotent
        XCTAssertThrowsError(try RawHTTPClient.connect(port: s.port))
    }
}

final class ConcurrencyTests: XCTestCase {
    func testConcurrentClientsAllAnsweredAndCounted() throws {
        let s = try startServer { router in
            router.add("POST", "/echo/{n}") { req in
                .json(200, .object(["n": .string(req.pathParameters["n"] ?? ""), "len": .int(Int64(req.body.count))]))
            }
        }
        let port = s.port
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for i in 0..<50 {
                let body = Array(repeating: UInt8(ascii: "x"), count: (worker * 50 + i) * 37 % 9000)
                do {
                    let r = try RawHTTPClient.request(port: port, method: "POST", path: "/echo/\(worker)-\(i)", body: body)
                    if r.status != 200 || r.json?["n"]?.stringValue != "\(worker)-\(i)" || r.json?["len"]?.intValue != Int64(body.count) {
                        failures.withLock { $0.append("\(worker)-\(i): \(r.status) \(r.text)") }
                    }
                } catch {
                    failures.withLock { $0.append("\(worker)-\(i): \(error)") }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertTrue(s.metrics.render().contains("http_requests_total{route=\"/echo/{n}\",method=\"POST\",status=\"200\"} 400\n"))
    }
}
