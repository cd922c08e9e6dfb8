import CNGHTTP2
#if canImport(Glibc)
import Glibc
#endif

/// A stream's outgoing DATA (a client's request body, a server's response body) and how much
/// of it nghttp2 has pulled so far (`NGHTTP2.readChunk`); touched only by the I/O thread.
final class OutgoingBody {
    let bytes: [UInt8]
    var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

/// Helpers shared by the client and server sessions. Internal.
enum NGHTTP2 {
    /// Whether an I/O loop is done: `session` wants neither to read nor to write and
    /// `unwritten` (bytes it produced that the socket has not taken yet) is 0.
    static func isDone(_ session: OpaquePointer?, unwritten: Int) -> Bool {
        nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 && unwritten == 0
    }

    /// One wait of an I/O loop: polls `fd` for input (and for output while `wantsWrite`) and
    /// `wake` for a wake-up, for at most `timeoutMilliseconds`, and drains `wake` when it
    /// fired. Returns whether `fd` has an event (readable, writable, error or hang-up).
    static func waitForIO(fd: Int32, wake: WakePipe, wantsWrite: Bool, timeoutMilliseconds: Int32) -> Bool {
        var fds = [
            pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)
        ]
        if wantsWrite { fds[0].events |= Int16(POLLOUT) }
        _ = poll(&fds, 2, timeoutMilliseconds)
        if fds[1].revents != 0 { wake.drain() }
        return fds[0].revents != 0
    }

    /// Appends everything `session` has to send now to `outbound` (`nghttp2_session_mem_send`
    /// until it returns 0), calling `produced` with each chunk's size as it is appended (before
    /// the next `mem_send`, whose callbacks may read the running total). Returns the bytes
    /// appended, or nghttp2's negative error code.
    static func pull(_ session: OpaquePointer?, into outbound: inout [UInt8], produced: (Int) -> Void = { _ in }) -> Int {
        var pulled = 0
        while true {
            var data: UnsafePointer<UInt8>? = nil
            let n = nghttp2_session_mem_send(session, &data)
            if n <= 0 { return n < 0 ? n : pulled }
            if let data { outbound.append(contentsOf: UnsafeBufferPointer(start: data, count: n)) }
            produced(n)
            pulled += n
        }
    }

    /// The work of an `nghttp2_data_source_read_callback`: copies the next chunk of `body` (at
    /// most `length` bytes) into `buffer`, advances its offset and sets `NGHTTP2_DATA_FLAG_EOF`
    /// in `flags` once all of it was copied. Returns the byte count, or
    /// `NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE` when the stream or a pointer is missing.
    static func readChunk(
        _ body: OutgoingBody?, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int, _ flags: UnsafeMutablePointer<UInt32>?
    ) -> Int {
        guard let buffer, let flags, let body else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let count = min(length, body.bytes.count - body.offset)
        body.bytes.withUnsafeBytes { source in
            if count > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: source.baseAddress! + body.offset, byteCount: count) }
        }
        body.offset += count
        if body.offset == body.bytes.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    /// nghttp2's text for a negative library error code.
    static func errorText(_ code: Int) -> String { String(cString: nghttp2_strerror(Int32(truncatingIfNeeded: code))) }

    /// Calls `body` with an `nghttp2_nv` array for `fields` (names and values copied into one
    /// temporary buffer; nghttp2 copies them again on submit, so the buffer lives only for the
    /// call). Regular field names are lowercased (RFC 9113 §8.2.1).
    static func withHeaders<R>(_ fields: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) -> R {
        let encoded: [([UInt8], [UInt8])] = fields.map { name, value in
            (Array((name.hasPrefix(":") ? name : HTTP2FieldName.lowercased(name)).utf8), Array(value.utf8))
        }
        let total = encoded.reduce(0) { $0 + $1.0.count + $1.1.count }
        let storage = UnsafeMutablePointer<UInt8>.allocate(capacity: max(total, 1))
        defer { storage.deallocate() }
        var nvs: [nghttp2_nv] = []
        nvs.reserveCapacity(encoded.count)
        var offset = 0
        for (name, value) in encoded {
            let namePtr = storage + offset
            name.withUnsafeBufferPointer { if let b = $0.baseAddress { namePtr.update(from: b, count: $0.count) } }
            offset += name.count
            let valuePtr = storage + offset
            value.withUnsafeBufferPointer { if let b = $0.baseAddress { valuePtr.update(from: b, count: $0.count) } }
            offset += value.count
            nvs.append(
                nghttp2_nv(
                    name: namePtr, value: valuePtr, namelen: name.count, valuelen: value.count,
                    flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        }
        return nvs.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
    }

    /// Text of an RFC 9113 §7 error code, e.g. "REFUSED_STREAM (7)".
    static func codeName(_ code: UInt32) -> String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
            "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
            "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"
        ]
        return Int(code) < names.count ? "\(names[Int(code)]) (\(code))" : "error \(code)"
    }

    /// Bytes of a name or value passed to a header callback.
    static func string(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> String {
        guard let pointer, count > 0 else { return "" }
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }
}
