import Dispatch
import Locking

/// A request handed from a caller thread to a connection's I/O thread. The first `complete`
/// wins; a blocking caller waits in `wait` until then, an asynchronous one gets `completion`
/// (called once, on the thread that completes: usually the I/O thread, so it must be short and
/// must not block).
final class PendingRequest: Sendable {
    let request: HTTP2Request
    /// Monotonic seconds (`Socket.now()`) after which the request times out.
    let deadline: Double
    /// Called once when the request's HEADERS frame has been completely written to the socket.
    let onWritten: (@Sendable () -> Void)?
    private let completion: (@Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void)?
    private let done = DispatchSemaphore(value: 0)
    private let outcome = Locked<Result<HTTP2Response, HTTP2Failure>?>(nil)

    init(
        _ request: HTTP2Request, deadline: Double, onWritten: (@Sendable () -> Void)? = nil,
        completion: (@Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void)? = nil
    ) {
        self.request = request
        self.deadline = deadline
        self.onWritten = onWritten
        self.completion = completion
    }

    /// Records the outcome unless one is already recorded; returns whether this call won.
    @discardableResult
    func complete(_ result: Result<HTTP2Response, HTTP2Failure>) -> Bool {
        let won = outcome.withLock { current in
            if current != nil { return false }
            current = result
            return true
        }
        if won {
            done.signal()
            completion?(result)
        }
        return won
    }

    var isCompleted: Bool { outcome.withLock { $0 != nil } }

    /// Blocks until completed. `backstopSeconds` guards against a stuck I/O thread: after it the
    /// request fails `.possiblyProcessed` (its state is unknown).
    func wait(backstopSeconds: Double) -> Result<HTTP2Response, HTTP2Failure> {
        if done.wait(timeout: .now() + backstopSeconds) == .timedOut {
            complete(.failure(.possiblyProcessed(reason: "connection I/O thread did not answer in time")))
        }
        return outcome.withLock { $0! }
    }
}

/// Client-side state of one open stream; touched only by the I/O thread.
final class ClientStream {
    let pending: PendingRequest
    let body: OutgoingBody
    /// Outbound byte offset at which this stream's HEADERS frame ends, once serialized.
    var headersEnd: UInt64?
    var status = 0
    var headers: [(String, String)] = []
    var responseBody: [UInt8] = []
    /// Set when the peer sent more than the configuration's `maxResponseBodyBytes`: the stream
    /// is reset and the request fails `.possiblyProcessed` (the peer did act on it).
    var responseTooLarge = false

    init(_ pending: PendingRequest) {
        self.pending = pending
        self.body = OutgoingBody(pending.request.body)
    }
}
