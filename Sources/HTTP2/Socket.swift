#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Low-level POSIX helpers for the I/O threads: non-blocking TCP sockets, a self-pipe to wake
/// `poll`, and a monotonic clock. Internal; every descriptor is owned by exactly one caller.
enum Socket {
    /// Ignores SIGPIPE process-wide once: OpenSSL writes to sockets with `write(2)`, which
    /// would otherwise kill the process when the peer has closed the connection.
    static let ignoreSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    /// Monotonic time in seconds (CLOCK_MONOTONIC), for deadlines.
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL, 0)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    static func errorText(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// Connects a non-blocking TCP socket to `host:port`, trying each resolved address until
    /// `deadline` (monotonic seconds). Sets TCP_NODELAY. Throws `.notProcessed` on failure.
    static func connect(host: String, port: Int, deadline: Double) throws(HTTP2Failure) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = 0  // any address family: IPv4 and IPv6 (getaddrinfo(3))
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw .notProcessed(reason: "cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let ai = cursor {
            cursor = ai.pointee.ai_next
            let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
            if fd < 0 { lastError = errorText(errno); continue }
            setNonBlocking(fd)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 { return fd }
            if errno != EINPROGRESS { lastError = errorText(errno); close(fd); continue }
            if wait(fd, events: Int16(POLLOUT), deadline: deadline) {
                var err: Int32 = 0
                var len = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
                if err == 0 { return fd }
                lastError = errorText(err)
            } else {
                lastError = "connect timed out"
            }
            close(fd)
        }
        throw .notProcessed(reason: "cannot connect to \(host):\(port): \(lastError)")
    }

    /// Polls one descriptor for `events` until `deadline`; true when ready (or in error).
    static func wait(_ fd: Int32, events: Int16, deadline: Double) -> Bool {
        while true {
            let remaining = deadline - now()
            if remaining <= 0 { return false }
            var p = pollfd(fd: fd, events: events, revents: 0)
            let n = poll(&p, 1, Int32(min(remaining * 1000, 60_000)) + 1)
            if n > 0 { return true }
            if n < 0 && errno != EINTR { return true }
        }
    }

    /// Listens on `host:port` (port 0 = ephemeral); returns the descriptor and the bound port.
    static func listen(host: String, port: Int) throws -> (fd: Int32, port: Int) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST
        var list: UnsafeMutablePointer<addrinfo>? = nil
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let ai = list else {
            throw HTTP2Failure.notProcessed(reason: "listen address must be a numeric IP: \(host)")
        }
        defer { freeaddrinfo(list) }
        let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTP2Failure.notProcessed(reason: "socket: \(errorText(errno))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0, Glibc.listen(fd, 512) == 0 else {
            let text = errorText(errno)
            close(fd)
            throw HTTP2Failure.notProcessed(reason: "cannot listen on \(host):\(port): \(text)")
        }
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        let family = storage.ss_family
        let bound: UInt16 = withUnsafePointer(to: &storage) { p in
            if family == sa_family_t(AF_INET6) {
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port }
            }
            return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port }
        }
        setNonBlocking(fd)
        return (fd, Int(UInt16(bigEndian: bound)))
    }
}

/// A non-blocking self-pipe: `signal()` from any thread makes the read end readable so the
/// owning I/O thread leaves `poll`; the I/O thread calls `drain()`.
final class WakePipe: @unchecked Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [0, 0]
        if pipe(&fds) != 0 { fatalError("pipe(): \(Socket.errorText(errno))") }
        readFD = fds[0]
        writeFD = fds[1]
        Socket.setNonBlocking(readFD)
        Socket.setNonBlocking(writeFD)
    }

    func signal() {
        var byte: UInt8 = 1
        _ = write(writeFD, &byte, 1)
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(readFD, &buffer, buffer.count) > 0 {}
    }

    deinit {
        close(readFD)
        close(writeFD)
    }
}
