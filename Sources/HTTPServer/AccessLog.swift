import Foundation
import JSON

/// JSON log lines: `{"ts":"2026-10-18T13:00:00.000Z","level":"info","msg":"request",…}`.
/// Never holds bodies, query strings or the `Authorization` header.
enum AccessLog {
    /// One log line (no trailing newline) with `ts`, `level`, `msg` and `fields`.
    static func line(level: String, msg: String, fields: [String: JSONValue]) -> String {
        var object = fields
        object["ts"] = .string(timestamp())
        object["level"] = .string(level)
        object["msg"] = .string(msg)
        return JSONValue.object(object).jsonString
    }

    /// The access-log line of one request; `durationSeconds` is written as `duration_ms` with
    /// three decimals, `route` as null when nothing matched.
    static func request(
        requestId: String, method: String, route: String?, path: String, status: Int,
        durationSeconds: Double, bytesIn: Int, bytesOut: Int
    ) -> String {
        line(
            level: "info", msg: "request",
            fields: [
                "request_id": .string(requestId),
                "method": .string(method),
                "route": route.map { .string($0) } ?? .null,
                "path": .string(path),
                "status": .int(Int64(status)),
                "duration_ms": .double((durationSeconds * 1_000_000).rounded() / 1000),
                "bytes_in": .int(Int64(bytesIn)),
                "bytes_out": .int(Int64(bytesOut))
            ])
    }

    /// Current UTC time as RFC 3339 with milliseconds (docs/http-conventions.md): `2026-10-18T13:00:00.000Z`.
    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let millis = Int(ts.tv_nsec / 1_000_000)
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T"
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(millis, 3))Z"
    }
}
