import Foundation
import JSON
#if canImport(Glibc)
import Glibc
#endif

/// A parsed response as received on the wire.
struct RawResponse {
    var status: Int
    var headers: [String: String]  // lowercased names
    var body: [UInt8]

    func header(_ name: String) -> String? { headers[name.lowercased()] }
    var json: JSONValue? { try? JSONValue.parse(body) }
    var text: String { String(decoding: body, as: UTF8.self) }
}

struct RawHTTPError: Error, CustomStringConvertible {
    let description: String
    let errno: Int32
}

/// A deliberately tiny HTTP/1.1 test client over a blocking IPv4 socket: one request per
/// connection (`Connection: close`), reads until the server closes. Lets tests send exactly
/// the bytes they mean (chunked bodies, odd headers) without URLSession.
enum RawHTTPClient {
    static func connect(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPError(description: "socket failed", errno: errno) }
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 {
            let e = errno
            close(fd)
            throw RawHTTPError(description: "connect failed: \(String(cString: strerror(e)))", errno: e)
        }
        return fd
    }

    /// Sends `raw` bytes and reads the whole response. Write errors (the server may answer
    /// early and close) are ignored: the response is read anyway.
    static func exchange(port: Int, raw: [UInt8]) throws -> RawResponse {
        let fd = try connect(port: port)
        defer { close(fd) }
        var offset = 0
        while offset < raw.count {
            let n = raw[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            offset += n
        }
        return try parse(readAll(fd))
    }

    /// Reads `fd` until the peer closes (or the receive timeout), `bufferSize` bytes at a time;
    /// the bytes read.
    static func readAll(_ fd: Int32, bufferSize: Int = 65_536) -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: bufferSize)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
        }
        return received
    }

    static func request(
        port: Int, method: String, path: String, headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) throws -> RawResponse {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        return try exchange(port: port, raw: Array(head.utf8) + (body ?? []))
    }

    /// Sends `body` with `Transfer-Encoding: chunked` in chunks of `chunkSize` bytes.
    static func chunked(port: Int, method: String, path: String, body: [UInt8], chunkSize: Int = 8192) throws -> RawResponse {
        var raw = Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        var i = 0
        while i < body.count {
            let end = min(i + chunkSize, body.count)
            raw += Array("\(String(end - i, radix: 16))\r\n".utf8) + body[i..<end] + Array("\r\n".utf8)
            i = end
        }
        raw += Array("0\r\n\r\n".utf8)
        return try exchange(port: port, raw: raw)
    }

    static func parse(_ bytes: [UInt8]) throws -> RawResponse {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = (0..<max(0, bytes.count - 3)).first(where: { Array(bytes[$0..<$0 + 4]) == separator }) else {
            throw RawHTTPError(description: "no complete response head in \(bytes.count) bytes", errno: 0)
        }
        let lines = String(decoding: bytes[0..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw RawHTTPError(description: "bad status line \(lines[0])", errno: 0) }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(bytes[(end + 4)...])
        if let length = headers["content-length"].flatMap(Int.init), length <= body.count { body = Array(body[0..<length]) }
        return RawResponse(status: status, headers: headers, body: body)
    }
}
