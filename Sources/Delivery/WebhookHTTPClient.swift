import Foundation
#if canImport(Glibc)
import Glibc
#endif
import CCurl
import LiveRelayCore
import LiveRelayStore

/// Settings of the webhook HTTP client (docs/webhooks.md "Delivery").
public struct WebhookHTTPConfiguration: Sendable {
    /// `LIVERELAY_WEBHOOK_ALLOW_PRIVATE=1`: `http://` and private/loopback addresses allowed.
    public var allowPrivate: Bool
    /// Connect timeout, milliseconds (10 s).
    public var connectTimeoutMs: Int = 10_000
    /// Whole-request timeout, milliseconds (10 s: a 2xx must arrive within it).
    public var totalTimeoutMs: Int = 10_000
    /// Largest response body read, bytes; a longer one fails the attempt.
    public var maxResponseBytes: Int = 64 * 1024
    /// PEM of extra trusted CAs (`LIVERELAY_EXTRA_CA_FILE`), added to the system's bundle.
    public var extraCAFile: String?
    /// System CA bundle (Debian ca-certificates).
    public var systemCAFile: String = "/etc/ssl/certs/ca-certificates.crt"
    public init(allowPrivate: Bool, extraCAFile: String? = nil) {
        self.allowPrivate = allowPrivate
        self.extraCAFile = extraCAFile
    }
}

/// One POST to a tenant's receiver over HTTP/1.1 (+ TLS) through libcurl, wrapped thinly:
/// connect and total timeouts, redirects never followed (a 3xx is just a failed status),
/// no proxy from the environment, protocols `https` (or `http,https` when private targets are
/// allowed), a response-size cap, and the SSRF rule applied to the address of every connection
/// curl opens (`CURLOPT_OPENSOCKETFUNCTION` checks the resolved sockaddr, so a name that
/// rebinds to 127.0.0.1 is refused at connect time). Safe to call from many threads at once:
/// each call has its own easy handle. Source: libcurl's `curl_easy_setopt(3)` pages.
public final class WebhookHTTPClient: Sendable {
    public let configuration: WebhookHTTPConfiguration
    private let caBundle: [UInt8]?
    /// The attempt's `error` when the SSRF rule refused an address the host resolved to and no
    /// connection was made. It names no address: the tenant reads it, and an address could be
    /// an internal DNS answer.
    public static let refusedAddressError = "address refused: the host resolved to an address that is not public"

    private static let globalInit: Bool = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK }()

    /// - Throws: `WebhookClientError` when curl cannot be initialised or the extra CA file
    ///   cannot be read.
    public init(configuration: WebhookHTTPConfiguration) throws {
        guard Self.globalInit else { throw WebhookClientError("curl_global_init failed") }
        self.configuration = configuration
        if let extra = configuration.extraCAFile {
            guard let pem = FileManager.default.contents(atPath: extra) else {
                throw WebhookClientError("cannot read LIVERELAY_EXTRA_CA_FILE \(extra)")
            }
            let system = FileManager.default.contents(atPath: configuration.systemCAFile) ?? Data()
            caBundle = Array(system) + [0x0A] + Array(pem)
        } else {
            caBundle = nil
        }
    }

    /// POSTs `body` to `url` with `headers` (name, value). Never throws: every problem is an
    /// outcome with `error` set (e.g. `refusedAddressError`, `timeout: …`).
    /// - Parameter connection: a thread's reusable handle (keeps connections to receivers
    ///   alive between attempts; a reused connection was checked when it was opened); nil: a
    ///   fresh handle for this request alone.
    public func post(url: String, headers: [(String, String)], body: [UInt8], connection: WebhookConnection? = nil) -> WebhookAttemptOutcome {
        let started = DispatchTime.now()
        func elapsed() -> Int { Int((DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000) }
        do {
            _ = try WebhookRules.parseURL(url, allowPrivate: configuration.allowPrivate)
        } catch let e as DomainError {
            return WebhookAttemptOutcome(statusCode: nil, error: "url refused: \(e.message)", durationMs: 0)
        } catch {
            return WebhookAttemptOutcome(statusCode: nil, error: "url refused", durationMs: 0)
        }
        let own = connection == nil
        guard let h = connection?.handle ?? curl_easy_init() else {
            return WebhookAttemptOutcome(statusCode: nil, error: "curl_easy_init failed", durationMs: 0)
        }
        if !own { curl_easy_reset(h) }  // options back to defaults; the connection cache stays
        defer { if own { curl_easy_cleanup(h) } }
        let ctx = RequestContext(allowPrivate: configuration.allowPrivate, maxBytes: configuration.maxResponseBytes)
        let ctxPtr = Unmanaged.passRetained(ctx)
        defer { ctxPtr.release() }
        var list: UnsafeMutablePointer<curl_slist>?
        for (k, v) in headers { list = curl_slist_append(list, "\(k): \(v)") }
        list = curl_slist_append(list, "Expect:")  // no 100-continue round trip
        defer { curl_slist_free_all(list) }
        var errbuf = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let code: CURLcode = body.withUnsafeBufferPointer { bp in
            errbuf.withUnsafeMutableBufferPointer { eb in
                var blob = curl_blob(data: nil, len: 0, flags: UInt32(CURL_BLOB_COPY))
                _ = lr_curl_setopt_str(h, CURLOPT_URL, url)
                _ = lr_curl_setopt_long(h, CURLOPT_NOSIGNAL, 1)
                _ = lr_curl_setopt_long(h, CURLOPT_FOLLOWLOCATION, 0)
                _ = lr_curl_setopt_str(h, CURLOPT_PROTOCOLS_STR, configuration.allowPrivate ? "http,https" : "https")
                _ = lr_curl_setopt_str(h, CURLOPT_PROXY, "")
                _ = lr_curl_setopt_str(h, CURLOPT_NOPROXY, "*")
                _ = lr_curl_setopt_long(h, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
                _ = lr_curl_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeoutMs)
                _ = lr_curl_setopt_long(h, CURLOPT_TIMEOUT_MS, configuration.totalTimeoutMs)
                _ = lr_curl_setopt_long(h, CURLOPT_POST, 1)
                _ = lr_curl_setopt_ptr(h, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: bp.baseAddress))
                _ = lr_curl_setopt_long(h, CURLOPT_POSTFIELDSIZE, bp.count)
                _ = lr_curl_setopt_slist(h, CURLOPT_HTTPHEADER, list)
                _ = lr_curl_setopt_ptr(h, CURLOPT_ERRORBUFFER, eb.baseAddress)
                _ = lr_curl_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1)
                _ = lr_curl_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2)
                _ = lr_curl_setopt_off(h, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(configuration.maxResponseBytes))
                _ = lr_curl_setopt_write(h, webhookWriteCallback)
                _ = lr_curl_setopt_ptr(h, CURLOPT_WRITEDATA, ctxPtr.toOpaque())
                _ = lr_curl_setopt_opensocket(h, webhookOpenSocketCallback)
                _ = lr_curl_setopt_ptr(h, CURLOPT_OPENSOCKETDATA, ctxPtr.toOpaque())
                if let ca = caBundle {
                    return ca.withUnsafeBufferPointer { cb in
                        blob.data = UnsafeMutableRawPointer(mutating: cb.baseAddress)
                        blob.len = cb.count
                        _ = lr_curl_setopt_blob(h, CURLOPT_CAINFO_BLOB, &blob)
                        return curl_easy_perform(h)
                    }
                }
                return curl_easy_perform(h)
            }
        }
        var status: Int = 0
        _ = lr_curl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
        let ms = elapsed()
        if ctx.refused != nil && code != CURLE_OK {
            // No connection: the SSRF rule refused an address and no other one answered (a host
            // with a public address beside a refused one may still be delivered to). The tenant
            // reads this in its delivery log: it never names the address, which could be an
            // internal DNS answer (docs/webhooks.md "Safety").
            return WebhookAttemptOutcome(statusCode: nil, error: Self.refusedAddressError, durationMs: ms)
        }
        if ctx.tooLarge || code == CURLE_FILESIZE_EXCEEDED {
            return WebhookAttemptOutcome(
                statusCode: status == 0 ? nil : status,
                error: "response body over \(configuration.maxResponseBytes) bytes", durationMs: ms)
        }
        guard code == CURLE_OK else {
            let detail = cText(errbuf)
            let kind = code == CURLE_OPERATION_TIMEDOUT ? "timeout" : "network"
            return WebhookAttemptOutcome(
                statusCode: status == 0 ? nil : status,
                error: "\(kind): \(detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail)", durationMs: ms)
        }
        if (200..<300).contains(status) { return WebhookAttemptOutcome(statusCode: status, error: nil, durationMs: ms) }
        let why = (300..<400).contains(status) ? "redirect not followed" : "status \(status)"
        return WebhookAttemptOutcome(statusCode: status, error: why, durationMs: ms)
    }
}

/// One libcurl easy handle kept by one sender thread, so its connection cache (HTTP/1.1
/// keep-alive, TLS sessions) survives between attempts. Not for concurrent use: one thread at a
/// time (hence `@unchecked Sendable`); `close()` (or deinit) frees it.
public final class WebhookConnection: @unchecked Sendable {
    var handle: UnsafeMutableRawPointer?
    public init() { handle = curl_easy_init() }
    public func close() { if let h = handle { curl_easy_cleanup(h) }; handle = nil }
    deinit { close() }
}

/// A client-side problem of the webhook client's set-up.
public struct WebhookClientError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// Per-request state the C callbacks reach through their `void*` argument. Used by one curl
/// transfer on one thread at a time (curl calls the callbacks on the performing thread), so the
/// mutable fields need no lock; hence `@unchecked Sendable`.
final class RequestContext: @unchecked Sendable {
    let allowPrivate: Bool
    let maxBytes: Int
    var received = 0
    var tooLarge = false
    /// The refused address (text), when the SSRF rule closed a connection; never shown to the
    /// tenant (`WebhookHTTPClient.refusedAddressError`).
    var refused: String?
    init(allowPrivate: Bool, maxBytes: Int) { self.allowPrivate = allowPrivate; self.maxBytes = maxBytes }
}

/// Counts response bytes and aborts the transfer (returns 0) past the cap; the body is discarded.
private let webhookWriteCallback: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = { _, size, n, ud in
    guard let ud else { return 0 }
    let ctx = Unmanaged<RequestContext>.fromOpaque(ud).takeUnretainedValue()
    ctx.received += size * n
    if ctx.received > ctx.maxBytes { ctx.tooLarge = true; return 0 }
    return size * n
}

/// Opens the socket curl asks for, unless its address is forbidden (then CURL_SOCKET_BAD,
/// which fails the connection): the connect-time SSRF check on the resolved address.
private let webhookOpenSocketCallback:
    @convention(c) (UnsafeMutableRawPointer?, curlsocktype, UnsafeMutablePointer<curl_sockaddr>?) -> curl_socket_t = { ud, _, addr in
        guard let ud, let addr else { return CURL_SOCKET_BAD }
        let ctx = Unmanaged<RequestContext>.fromOpaque(ud).takeUnretainedValue()
        let family = addr.pointee.family
        var bytes: [UInt8] = []
        withUnsafePointer(to: &addr.pointee.addr) { p in
            p.withMemoryRebound(to: UInt8.self, capacity: MemoryLayout<sockaddr_in6>.size) { raw in
                if family == AF_INET {
                    let off = MemoryLayout<sockaddr_in>.offset(of: \sockaddr_in.sin_addr)!
                    bytes = Array(UnsafeBufferPointer(start: raw + off, count: 4))
                } else if family == AF_INET6 {
                    let off = MemoryLayout<sockaddr_in6>.offset(of: \sockaddr_in6.sin6_addr)!
                    bytes = Array(UnsafeBufferPointer(start: raw + off, count: 16))
                }
            }
        }
        if !ctx.allowPrivate && WebhookRules.isForbiddenAddress(bytes) {
            ctx.refused = addressText(family: family, bytes)
            return CURL_SOCKET_BAD
        }
        return socket(family, addr.pointee.socktype, addr.pointee.protocol)
    }

private func addressText(family: Int32, _ bytes: [UInt8]) -> String {
    var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    var b = bytes
    let ok = b.withUnsafeMutableBytes { inet_ntop(family, $0.baseAddress, &buf, socklen_t(buf.count)) } != nil
    return ok ? cText(buf) : "?"
}

/// The text of a NUL-terminated C buffer.
private func cText(_ buf: [CChar]) -> String {
    String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
