import Foundation

/// Event types of the events API and webhooks (docs/webhooks.md "Event types").
/// `channel.ended` is reserved: it is accepted in subscriptions but nothing emits it until
/// channels exist.
public enum EventType: String, Sendable, CaseIterable {
    case operationAccepted = "operation.accepted"
    case operationFailed = "operation.failed"
    case operationUnknown = "operation.unknown"
    case operationExpired = "operation.expired"
    case targetReady = "target.ready"
    case targetEnded = "target.ended"
    case startTargetReady = "start_target.ready"
    case startTargetPending = "start_target.pending"
    case installationRetired = "installation.retired"
    case channelEnded = "channel.ended"
    case quotaExhausted = "quota.exhausted"
    case webhookTest = "webhook.test"
}

/// Pure checks and policies of webhook endpoints (docs/webhooks.md): the URL rules, the
/// subscription list, the retry schedule and when to give up or disable. No I/O.
public enum WebhookRules {
    /// Longest accepted `url`, bytes.
    public static let maxURLLength = 2048
    /// Most entries in `events`.
    public static let maxEvents = EventType.allCases.count + 1
    /// Longest `description`, characters.
    public static let maxDescriptionLength = 500
    /// Largest `expires_in_seconds` of a secret rotation (7 days).
    public static let maxRotationOverlapSeconds: Int64 = 7 * 24 * 3600
    /// Retry schedule: full jitter below a ceiling that starts at 10 s (so the first retry
    /// comes within 10 s), doubles per attempt and is capped at 6 h.
    public static let retryPolicy = RetryPolicy(base: 10, factor: 2, cap: 6 * 3600)
    /// A delivery is retried for at least this long (seconds) …
    public static let retryWindowSeconds: Double = 72 * 3600
    /// … and at least this many attempts before it is given up.
    public static let minimumAttempts = 10

    /// A parsed, acceptable endpoint URL.
    public struct Target: Sendable, Equatable {
        public let scheme: String
        public let host: String
        public let port: Int
    }

    /// Checks `url` (field `url`): absolute `https://` (or `http://` when `allowPrivate`),
    /// a host, no user info, no fragment, at most `maxURLLength` bytes.
    /// - Throws: `DomainError` 400 `INVALID_REQUEST` with `details.field = "url"`.
    public static func parseURL(_ url: String, allowPrivate: Bool) throws -> Target {
        guard url.utf8.count <= maxURLLength else {
            throw DomainError.invalid("url", "url must be at most \(maxURLLength) bytes")
        }
        guard let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), let host = c.host, !host.isEmpty else {
            throw DomainError.invalid("url", "url must be an absolute https:// URL")
        }
        if scheme != "https" && !(allowPrivate && scheme == "http") {
            throw DomainError.invalid("url", allowPrivate ? "url must use https:// or http://" : "url must use https://")
        }
        if c.user != nil || c.password != nil { throw DomainError.invalid("url", "url must not carry user info") }
        if c.fragment != nil { throw DomainError.invalid("url", "url must not have a fragment") }
        if url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            throw DomainError.invalid("url", "url must not contain spaces or control characters")
        }
        let h = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return Target(scheme: scheme, host: h, port: c.port ?? (scheme == "https" ? 443 : 80))
    }

    /// Checks the subscription list: 1…`maxEvents` entries, each a known type or `"*"`, no
    /// duplicates. Returns it sorted.
    /// - Throws: `DomainError` 400 `INVALID_REQUEST` naming `events` or `events.<i>`.
    public static func parseEvents(_ events: [String]?) throws -> [String] {
        guard let events, !events.isEmpty else {
            throw DomainError.invalid("events", "events must list at least one event type, or \"*\"")
        }
        guard events.count <= maxEvents else { throw DomainError.invalid("events", "events may list at most \(maxEvents) types") }
        for (i, e) in events.enumerated() where e != "*" && EventType(rawValue: e) == nil {
            throw DomainError.invalid(
                "events.\(i)", "unknown event type \(e.debugDescription); known: \(EventType.allCases.map(\.rawValue).joined(separator: ", ")) or *")
        }
        if Set(events).count != events.count { throw DomainError.invalid("events", "events must not repeat a type") }
        return events.sorted()
    }

    /// True when an address may not be reached by a webhook unless private targets are
    /// allowed: loopback, private (RFC 1918, IPv6 unique local), link-local, unspecified,
    /// carrier-grade NAT, multicast, broadcast and reserved ranges, the IPv4-mapped,
    /// -compatible, -translated, NAT64 (64:ff9b::/96) and 6to4 (2002::/16) IPv6 forms of those,
    /// and every local-use NAT64 (64:ff9b:1::/48) and Teredo (2001::/32) address. `bytes` is 4 (IPv4) or 16 (IPv6) bytes in network order; any
    /// other length is forbidden.
    public static func isForbiddenAddress(_ bytes: [UInt8]) -> Bool {
        if bytes.count == 4 { return isForbiddenIPv4(bytes[0], bytes[1], bytes[2], bytes[3]) }
        guard bytes.count == 16 else { return true }
        if bytes.allSatisfy({ $0 == 0 }) { return true }  // ::
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }  // ::1
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && ((bytes[10] == 0xFF && bytes[11] == 0xFF) || (bytes[10] == 0 && bytes[11] == 0)) {
            return isForbiddenIPv4(bytes[12], bytes[13], bytes[14], bytes[15])  // ::ffff:a.b.c.d, ::a.b.c.d
        }
        if bytes[0] == 0 && bytes[1] == 0x64 && bytes[2] == 0xFF && bytes[3] == 0x9B && bytes[4...11].allSatisfy({ $0 == 0 }) {
            return isForbiddenIPv4(bytes[12], bytes[13], bytes[14], bytes[15])  // 64:ff9b::/96 NAT64
        }
        // Forms that carry an IPv4 address a host with the matching route would reach:
        if bytes[0..<8].allSatisfy({ $0 == 0 }) && bytes[8] == 0xFF && bytes[9] == 0xFF && bytes[10] == 0 && bytes[11] == 0 {
            return isForbiddenIPv4(bytes[12], bytes[13], bytes[14], bytes[15])  // ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765)
        }
        if bytes[0] == 0 && bytes[1] == 0x64 && bytes[2] == 0xFF && bytes[3] == 0x9B && bytes[4] == 0 && bytes[5] == 1 {
            return true  // 64:ff9b:1::/48 local-use NAT64 (RFC 8215): the embedded address may sit anywhere
        }
        if bytes[0] == 0x20 && bytes[1] == 0x02 {
            return isForbiddenIPv4(bytes[2], bytes[3], bytes[4], bytes[5])  // 2002::/16 6to4: 2002:a.b.c.d::/48
        }
        if bytes[0] == 0x20 && bytes[1] == 0x01 && bytes[2] == 0 && bytes[3] == 0 {
            return true  // 2001::/32 Teredo: tunnels to an obfuscated IPv4 client behind NAT
        }
        if bytes[0] & 0xFE == 0xFC { return true }  // fc00::/7 unique local
        if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 { return true }  // fe80::/10 link-local
        if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0xC0 { return true }  // fec0::/10 site-local
        if bytes[0] == 0xFF { return true }  // multicast
        if bytes[0] == 0x20 && bytes[1] == 0x01 && bytes[2] == 0x0D && bytes[3] == 0xB8 { return true }  // documentation
        return false
    }

    static func isForbiddenIPv4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> Bool {
        switch a {
        case 0, 10, 127: return true  // unspecified/"this network", private, loopback
        case 100 where b & 0xC0 == 64: return true  // 100.64.0.0/10 carrier-grade NAT
        case 169 where b == 254: return true  // link-local (cloud metadata)
        case 172 where b & 0xF0 == 16: return true  // 172.16.0.0/12
        case 192 where b == 168: return true  // 192.168.0.0/16
        case 192 where b == 0 && (c == 0 || c == 2): return true  // IETF protocol assignments, TEST-NET-1
        case 198 where b & 0xFE == 18: return true  // 198.18.0.0/15 benchmarking
        case 198 where b == 51 && c == 100, 203 where b == 0 && c == 113: return true  // TEST-NET-2/3
        case 224...255: return true  // multicast, reserved, broadcast
        default: return false
        }
    }

    /// When to try again after failed attempt number `attempts` (1-based), or nil to give up:
    /// a delivery is given up only once it has had at least `minimumAttempts` attempts AND is
    /// at least `retryWindowSeconds` old. `random` is uniform in 0..<1 (injected).
    /// - Returns: the delay in seconds (0 ≤ delay < 10 × 2^(attempts−1), ≤ 6 h).
    public static func retryDelay(attempts: Int, ageSeconds: Double, random: Double) -> Double? {
        if attempts >= minimumAttempts && ageSeconds >= retryWindowSeconds { return nil }
        return retryPolicy.delay(attempt: attempts, random: random)
    }

    /// True when an endpoint whose attempts have all failed since `failingSince` should be
    /// disabled at `now` (it failed throughout the retry window).
    public static func shouldDisable(failingSince: Date?, now: Date) -> Bool {
        guard let f = failingSince else { return false }
        return now.timeIntervalSince(f) >= retryWindowSeconds
    }
}
