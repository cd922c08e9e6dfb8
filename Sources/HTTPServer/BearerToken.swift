/// `Authorization: Bearer <token>` (RFC 6750 §2.1), shared by the API's authenticator and the
/// sandbox's APNs and FCM endpoints.
public enum BearerToken {
    /// The token of an `authorization: bearer <token>` header: the scheme matched without
    /// regard to case, spaces and tabs around the token dropped; nil for another scheme. Byte by
    /// byte, without a lowercased copy of the header or Foundation's trimming (which bridged to
    /// `NSString` and was a third of the sandbox's time per request in `perf`).
    public static func parse(_ header: String) -> String? {
        let u = header.utf8
        var i = u.startIndex
        for expected in "bearer ".utf8 {
            guard i < u.endIndex else { return nil }
            let c = u[i]
            guard (c >= 65 && c <= 90 ? c + 32 : c) == expected else { return nil }
            i = u.index(after: i)
        }
        var start = i, end = u.endIndex
        while start < end && (u[start] == 32 || u[start] == 9) { start = u.index(after: start) }
        while end > start {
            let p = u.index(before: end)
            guard u[p] == 32 || u[p] == 9 else { break }
            end = p
        }
        return String(header[start..<end])
    }
}
