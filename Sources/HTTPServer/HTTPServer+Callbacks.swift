import CMicroHTTPD
import CShims
import JSON
import Locking
import Synchronization

// libmicrohttpd callbacks. They capture nothing (a capturing @convention(c) closure crashes
// the Swift 6 compiler): the server arrives as `cls` (retained by `start()` until `shutdown`)
// and the per-request `RequestContext` as `*con_cls`, retained from the URI-log callback —
// the first callback of every request — until MHD_OPTION_NOTIFY_COMPLETED releases it.

/// Per-request state carried in libmicrohttpd's `*con_cls`. Touched by the polling thread,
/// except `outcome`, which a worker fills (under its lock) before resuming the connection.
/// `@unchecked Sendable` for that hand-off: the rest is never touched off the polling thread.
final class RequestContext: @unchecked Sendable {
    let start = ContinuousClock.now
    /// Raw request target (`/path?query`), as sent.
    let target: String
    var headersSeen = false
    var body: [UInt8] = []
    /// Content-Length as declared (Int.max when it overflows), nil for chunked bodies.
    var declaredLength: Int?
    /// Body bytes received so far, kept or not.
    var received = 0
    var tooLarge = false
    /// Set once the request went to the worker pool (the connection was suspended).
    var dispatched = false
    /// The answer, left by a worker for the polling thread after the resume.
    let outcome = Locked<RequestOutcome?>(nil)

    init(target: String) { self.target = target }
}

/// MHD_OPTION_URI_LOG_CALLBACK: first sight of a request; its return value becomes `*con_cls`.
let mhdURILogCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = {
    cls, uri, connection in
    guard let cls else { return nil }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    server.inFlightCount.add(1, ordering: .relaxed)
    if let connection, let state = server.connectionState(connection) { server.connectionGuard.requestBegan(state) }
    let context = RequestContext(target: uri.map { String(cString: $0) } ?? "/")
    return Unmanaged.passRetained(context).toOpaque()
}

/// MHD_OPTION_NOTIFY_COMPLETED: the request is over (answered, failed or timed out).
let mhdCompletedCallback: MHD_RequestCompletedCallback = { cls, connection, conCls, _ in
    guard let cls, let conCls, let raw = conCls.pointee else { return }
    conCls.pointee = nil
    Unmanaged<RequestContext>.fromOpaque(raw).release()
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    if let connection, let state = server.connectionState(connection) { server.connectionGuard.requestFinished(state) }
    server.inFlightCount.subtract(1, ordering: .releasing)
}

/// MHD_OPTION_NOTIFY_CONNECTION (through the C shim): a connection opened (`started` = 1) or
/// closed (0, before its socket is closed). Its `ConnectionState` lives in `*socket_context`,
/// retained from open to close.
let mhdConnectionNotify: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32) -> Void = {
    cls, connection, socketContext, started in
    guard let cls, let connection, let socketContext else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    if started != 0 {
        let state = ConnectionState(fd: lr_mhd_connection_fd(connection))
        socketContext.pointee = Unmanaged.passRetained(state).toOpaque()
        server.connectionGuard.opened(state)
    } else if let raw = socketContext.pointee {
        socketContext.pointee = nil
        server.connectionGuard.closed(Unmanaged<ConnectionState>.fromOpaque(raw).takeRetainedValue())
    }
}

/// The access handler: called once when headers are in, once per body chunk, once at the end.
let mhdAccessHandler: MHD_AccessHandlerCallback = { cls, connection, _, method, _, uploadData, uploadDataSize, conCls in
    guard let cls, let connection, let conCls, let uploadDataSize else { return .NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    let context: RequestContext
    if let raw = conCls.pointee {
        context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()
    } else {
        // Not expected (the URI-log callback runs first), but never trust it blindly.
        server.inFlightCount.add(1, ordering: .relaxed)
        context = RequestContext(target: "/")
        conCls.pointee = Unmanaged.passRetained(context).toOpaque()
    }
    let methodName = method.map { String(cString: $0) }?.uppercased() ?? "GET"
    return server.handle(
        connection: connection, context: context, method: methodName,
        uploadData: uploadData, uploadDataSize: uploadDataSize)
}

/// MHD_OPTION_EXTERNAL_LOGGER (through the C shim, which formats the message).
let mhdLogCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?) -> Void = { cls, message in
    guard let cls, let message else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    server.log(AccessLog.line(level: "warn", msg: "libmicrohttpd", fields: ["detail": .string(String(cString: message))]))
}

/// Collects request headers (names lowercased, repeats joined with ", ").
final class HeaderCollector {
    var headers: [String: String] = [:]
}

let mhdHeaderIterator: MHD_KeyValueIterator = { cls, _, key, value in
    guard let cls, let key else { return .YES }
    let collector = Unmanaged<HeaderCollector>.fromOpaque(cls).takeUnretainedValue()
    let name = String(cString: key).lowercased()
    let text = value.map { String(cString: $0) } ?? ""
    if let existing = collector.headers[name] { collector.headers[name] = existing + ", " + text } else { collector.headers[name] = text }
    return .YES
}
