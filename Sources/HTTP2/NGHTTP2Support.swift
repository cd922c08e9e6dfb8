import CNGHTTP2

/// Helpers shared by the client and server sessions. Internal.
enum NGHTTP2 {
    /// nghttp2's text for a negative library error code.
    static func errorText(_ code: Int) -> String { String(cString: nghttp2_strerror(Int32(truncatingIfNeeded: code))) }

    /// Calls `body` with an `nghttp2_nv` array for `fields` (names and values copied into one
    /// temporary buffer; nghttp2 copies them again on submit, so the buffer lives only for the
    /// call). Regular field names are lowercased (RFC 9113 §8.2.1).
    static func withHeaders<R>(_ fields: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) -> R {
        let encoded: [([UInt8], [UInt8])] = fields.map { name, value in
            (Array((name.hasPrefix(":") ? name : name.lowercased()).utf8), Array(value.utf8))
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
