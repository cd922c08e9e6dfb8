import Foundation
@testable import HTTP2
import Locking
import Synchronization
import XCTest

/// The asynchronous client API (docs/delivery.md "Sending"): `submit` returns at once, keeps
/// many streams in flight from one calling thread, reports when each request was written and
/// completes each exactly once.
final class SubmitTests: XCTestCase {
    final class Outcomes: Sendable {
        let results = Locked<[String: Result<HTTP2Response, HTTP2Failure>]>([:])
        let written = Locked<Set<String>>([])
        let writtenBeforeCompletion = Locked<Int>(0)
        let completions = Atomic<Int>(0)
        let all = DispatchSemaphore(value: 0)
        let expected: Int
        init(expected: Int) { self.expected = expected }

        func onWritten(_ id: String) -> @Sendable () -> Void { { self.written.withLock { _ = $0.insert(id) } } }
        func onComplete(_ id: String) -> @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void {
            { r in
                if self.written.withLock({ $0.contains(id) }) { self.writtenBeforeCompletion.withLock { $0 += 1 } }
                let first = self.results.withLock { $0.updateValue(r, forKey: id) == nil }
                XCTAssertTrue(first, "completed once: \(id)")
                if self.completions.wrappingAdd(1, ordering: .relaxed).newValue == self.expected { self.all.signal() }
            }
        }
    }

    func testOneThreadKeepsManyStreamsInFlightOnOneConnection() throws {
        let recorder = Recorder()
        try withConnection(recorder: recorder, sleepSeconds: 0.3) { _, connection in
            let o = Outcomes(expected: 40)
            for i in 0..<40 {
                connection.submit(
                    HTTP2Request(method: "POST", path: "/s", headers: [("x-id", "\(i)")]),
                    onWritten: o.onWritten("\(i)"), completion: o.onComplete("\(i)"))
            }
            XCTAssertEqual(o.all.wait(timeout: .now() + 20), .success)
            let results = o.results.withLock { $0 }
            for i in 0..<40 {
                guard case .success(let r)? = results["\(i)"] else { return XCTFail("request \(i): \(String(describing: results["\(i)"]))") }
                XCTAssertEqual(r.header("x-id"), "\(i)")
            }
            XCTAssertEqual(o.writtenBeforeCompletion.withLock { $0 }, 40, "every request was reported written before its response")
            XCTAssertEqual(recorder.peakConcurrency, 40, "all 40 were in flight at once though one thread submitted them")
        }
    }

    func testPoolOpensMoreConnectionsWhenStreamsRunOutAndCompletesEveryRequest() throws {
        let recorder = Recorder()
        try withPool(recorder: recorder, maxConcurrentStreams: 5, sleepSeconds: 0.2, maxConnections: 3) { pool in
            let o = Outcomes(expected: 30)
            for i in 0..<30 {
                pool.submit(HTTP2Request(method: "POST", path: "/p", headers: [("x-id", "\(i)")]), onWritten: nil, completion: o.onComplete("\(i)"))
            }
            XCTAssertEqual(o.all.wait(timeout: .now() + 30), .success)
            let results = o.results.withLock { $0 }
            XCTAssertTrue(results.values.allSatisfy { if case .success = $0 { return true } else { return false } }, "\(results)")
            XCTAssertEqual(Set(recorder.received).count, 30)
            XCTAssertEqual(pool.connectionCount, 3, "a connection per 5 streams, up to maxConnections")
            XCTAssertLessThanOrEqual(recorder.peakConcurrency, 15, "never more than 3 × SETTINGS_MAX_CONCURRENT_STREAMS in flight")
        }
    }

    func testSubmitToAClosedPoolOrUnreachablePeerFailsNotProcessed() throws {
        let server = try startServer()
        let port = server.port
        server.stop()
        let pool = HTTP2ConnectionPool(configuration: clientConfiguration(port: port), maxConnections: 2)
        let o = Outcomes(expected: 2)
        pool.submit(HTTP2Request(path: "/a"), onWritten: nil, completion: o.onComplete("a"))
        pool.submit(HTTP2Request(path: "/b"), onWritten: nil, completion: o.onComplete("b"))
        XCTAssertEqual(o.all.wait(timeout: .now() + 20), .success)
        for (id, r) in o.results.withLock({ $0 }) {
            guard case .failure(.notProcessed) = r else { return XCTFail("\(id): \(r)") }
        }
        pool.close()
        let closed = Outcomes(expected: 1)
        pool.submit(HTTP2Request(path: "/c"), onWritten: nil, completion: closed.onComplete("c"))
        XCTAssertEqual(closed.all.wait(timeout: .now() + 5), .success)
        guard case .failure(.notProcessed(let reason))? = closed.results.withLock({ $0["c"] }) else { return XCTFail("closed pool") }
        XCTAssertTrue(reason.contains("closed"), reason)
    }
}

/// `HTTP2Message.header` ignores ASCII case only, and field names are lowercased on the wire
/// exactly as `String.lowercased()` would.
final class FieldNameTests: XCTestCase {
    func testHeaderLookupIgnoresASCIICaseOnly() {
        let r = HTTP2Response(status: 200, headers: [("apns-id", "a"), ("X-Mixed", "b"), ("Étiquette", "c")], body: [])
        XCTAssertEqual(r.header("APNS-ID"), "a")
        XCTAssertEqual(r.header("x-mixed"), "b")
        XCTAssertEqual(r.header("Étiquette"), "c")
        XCTAssertNil(r.header("étiquette"), "non-ASCII letters compare as they are")
        XCTAssertNil(r.header("apns-i"))
        XCTAssertNil(r.header("apns-idx"))
    }

    func testWireNamesAreLowercased() {
        for name in ["apns-topic", "Apns-Topic", "AUTHORIZATION", "x-Ünïcode"] {
            XCTAssertEqual(HTTP2FieldName.lowercased(name), name.lowercased())
        }
    }
}
