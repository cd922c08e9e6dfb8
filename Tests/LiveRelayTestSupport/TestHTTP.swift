import Foundation
import Locking
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One HTTP answer as a test sees it.
public struct TestHTTPResponse: Sendable {
    /// The status, or -1 when no answer came (connection refused, timeout).
    public let status: Int
    /// Header fields, names lowercased.
    public let headers: [String: String]
    public let body: [UInt8]
    /// The body as UTF-8 text.
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A blocking HTTP/1.1 client for tests (URLSession under a semaphore).
public enum TestHTTP {
    /// Sends one request and waits for the answer.
    /// - Parameters:
    ///   - credential: sent as `Authorization: Bearer <credential>` when given.
    ///   - body: the request body; `Content-Type: application/json` is added when present.
    ///   - timeoutSeconds: URLSession's request timeout.
    public static func send(
        _ method: String, _ url: String, body: [UInt8]? = nil, credential: String? = nil,
        headers: [String: String] = [:], timeoutSeconds: Double = 60
    ) -> TestHTTPResponse {
        var req = URLRequest(url: URL(string: url)!, timeoutInterval: timeoutSeconds)
        req.httpMethod = method
        if let credential { req.setValue("Bearer \(credential)", forHTTPHeaderField: "Authorization") }
        for (k, v) in headers { req.setValue(v, forHTTPHeaderField: k) }
        if let body {
            req.httpBody = Data(body)
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let done = DispatchSemaphore(value: 0)
        let result = Locked(TestHTTPResponse(status: -1, headers: [:], body: []))
        URLSession.shared.dataTask(with: req) { data, resp, _ in
            let http = resp as? HTTPURLResponse
            var h: [String: String] = [:]
            for (k, v) in http?.allHeaderFields ?? [:] { h[String(describing: k).lowercased()] = String(describing: v) }
            result.withLock { $0 = TestHTTPResponse(status: http?.statusCode ?? -1, headers: h, body: Array(data ?? Data())) }
            done.signal()
        }.resume()
        done.wait()
        return result.current
    }
}
