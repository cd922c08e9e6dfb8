import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JSON
import Locking

/// A synchronous JSON client for `liverelay remote` (URLSession, one request at a time).
struct RemoteClient {
    let baseURL: String
    let key: String

    init(env: [String: String]) throws {
        guard let key = env["LIVERELAY_KEY"], !key.isEmpty else {
            throw RemoteUsageError("LIVERELAY_KEY is not set (a sender key lrs_…, or a master key lrm_…)")
        }
        var base = env["LIVERELAY_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://127.0.0.1:8080"
        while base.hasSuffix("/") { base.removeLast() }
        guard let u = URL(string: base), u.scheme == "http" || u.scheme == "https", u.host != nil else {
            throw RemoteUsageError("LIVERELAY_URL must be an http(s) URL, got \(base.debugDescription)")
        }
        self.baseURL = base
        self.key = key
    }

    func get(_ path: String, query: [(String, String)] = [], timeout: Double = 30) throws -> JSONValue {
        try send("GET", path, query: query, body: nil, timeout: timeout)
    }

    /// Sends one request; returns the JSON body of a 2xx answer.
    /// - Throws: `RemoteAPIError` for a status ≥ 400, `RemoteNetworkError` when no HTTP answer
    ///   arrived or a 2xx body is not JSON.
    func send(_ method: String, _ path: String, query: [(String, String)] = [], body: JSONValue?, timeout: Double = 30) throws -> JSONValue {
        var comps = URLComponents(string: baseURL + path)
        if !query.isEmpty { comps?.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
        // '+' is a space to most servers: encode it explicitly.
        if let encoded = comps?.percentEncodedQuery { comps?.percentEncodedQuery = encoded.replacingOccurrences(of: "+", with: "%2B") }
        guard let url = comps?.url else { throw RemoteUsageError("cannot build a URL from \(baseURL + path)") }
        var req = URLRequest(url: url, timeoutInterval: timeout)
        req.httpMethod = method
        req.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
        req.setValue("application/json", forHTTPHeaderField: "Accept")
        if let body {
            req.httpBody = Data(body.serialized())
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let done = DispatchSemaphore(value: 0)
        let result = Locked<(Int, [UInt8], String?, String?)>((-1, [], nil, nil))
        let task = URLSession.shared.dataTask(with: req) { data, resp, err in
            let http = resp as? HTTPURLResponse
            let rid = http?.value(forHTTPHeaderField: "X-Request-Id")
            result.withLock { $0 = (http?.statusCode ?? -1, Array(data ?? Data()), err.map { $0.localizedDescription }, rid) }
            done.signal()
        }
        task.resume()
        done.wait()
        let (status, bytes, error, requestId) = result.withLock { $0 }
        if status < 0 { throw RemoteNetworkError(message: "\(method) \(url.absoluteString): \(error ?? "no response")") }
        let json = try? JSONValue.parse(bytes)
        if status >= 400 {
            if let e = json?["error"], let code = e["code"]?.stringValue {
                throw RemoteAPIError(
                    status: status, code: code, message: e["message"]?.stringValue ?? "",
                    details: e["details"], requestId: e["request_id"]?.stringValue ?? requestId)
            }
            throw RemoteAPIError(
                status: status, code: "HTTP_\(status)", message: String(decoding: bytes.prefix(500), as: UTF8.self),
                details: nil, requestId: requestId)
        }
        guard let json else {
            throw RemoteNetworkError(message: "\(method) \(url.absoluteString): HTTP \(status) with a body that is not JSON")
        }
        return json
    }
}
