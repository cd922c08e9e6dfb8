import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LiveRelayCore
import Locking

/// The creation-time half of the webhook SSRF rule (docs/webhooks.md "Safety"): resolves a
/// URL's host with `getaddrinfo` and refuses it when any address is loopback, private,
/// link-local or unspecified (`WebhookRules.isForbiddenAddress`). The delivery client checks
/// every connection's address again (DNS rebinding). A name that does not resolve is
/// accepted: nothing can be reached through it until it does, and then the connect-time check
/// applies.
enum WebhookAddressCheck {
    /// The addresses `host` resolves to (4 or 16 bytes each); empty when it does not resolve.
    static func resolve(_ host: String) -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_family = 0  // any address family: IPv4 and IPv6 (getaddrinfo(3))
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &res) == 0, let first = res else { return [] }
        defer { freeaddrinfo(first) }
        var out: [[UInt8]] = []
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let ai = p {
            if let sa = ai.pointee.ai_addr {
                if ai.pointee.ai_family == AF_INET {
                    sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        var a = sin.pointee.sin_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                } else if ai.pointee.ai_family == AF_INET6 {
                    sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                        var a = sin6.pointee.sin6_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                }
            }
            p = ai.pointee.ai_next
        }
        return out
    }

    /// Lookups running at once, process-wide (each on a thread of its own). A name server that
    /// never answers holds a lookup for the resolver's whole timeout (`resolv.conf`: 5 s per
    /// try, several tries); without a bound, concurrent endpoint creations naming such hosts held
    /// every API handler thread for that long.
    static let maxConcurrentLookups = 4
    private static let lookupSlots = DispatchSemaphore(value: maxConcurrentLookups)
    /// Lookups one tenant may have running at once (of `maxConcurrentLookups`), so one tenant
    /// naming hosts that never answer cannot hold every slot.
    static let maxLookupsPerTenant = 1
    private static let lookupsByTenant = Locked<[String: Int]>([:])

    /// `resolve` bounded in time and in concurrency (docs/webhooks.md "Safety"): waits at most
    /// `slotWaitSeconds` (seconds) for one of `maxConcurrentLookups` slots, then at most
    /// `deadlineSeconds` (seconds) for the answer. A lookup still running after its deadline
    /// counts as a name that does not resolve (accepted; the connect-time check still applies)
    /// and keeps its slot until the resolver gives up, so stuck lookups never exceed the bound.
    /// - Throws: `HTTPError` 503 `SERVICE_UNAVAILABLE` with `Retry-After: 5` when no slot frees.
    /// `tenant`: whose request it is (at most `maxLookupsPerTenant` running at once, else 503
    /// at once); `resolver`: the lookup (tests).
    static func resolveBounded(
        _ host: String, tenant: String, slotWaitSeconds: Double = 1, deadlineSeconds: Double = 5,
        resolver: @escaping @Sendable (String) -> [[UInt8]] = { resolve($0) }
    ) throws -> [[UInt8]] {
        let admitted = lookupsByTenant.withLock { m -> Bool in
            guard m[tenant, default: 0] < maxLookupsPerTenant else { return false }
            m[tenant, default: 0] += 1
            return true
        }
        let leave: @Sendable () -> Void = {
            lookupsByTenant.withLock { m in
                let n = m[tenant, default: 1] - 1
                m[tenant] = n > 0 ? n : nil
            }
        }
        guard admitted else { throw Authenticator.busy(retryAfter: 5, doing: "the webhook address check") }
        guard lookupSlots.wait(timeout: .now() + slotWaitSeconds) == .success else {
            leave()
            throw Authenticator.busy(retryAfter: 5, doing: "the webhook address check")
        }
        let answer = Locked<[[UInt8]]>([])
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let addresses = resolver(host)
            answer.withLock { $0 = addresses }
            done.signal()
            lookupSlots.signal()
            leave()
        }
        guard done.wait(timeout: .now() + deadlineSeconds) == .success else { return [] }
        return answer.withLock { $0 }
    }

    /// Checks `url` for a webhook endpoint of `tenant`: shape (`WebhookRules.parseURL`) and,
    /// unless `allowPrivate`, that no address of its host is forbidden (`resolveBounded`).
    /// - Throws: `DomainError` 400 `INVALID_REQUEST` with `details.field = "url"`; `HTTPError`
    ///   503 when every lookup slot is taken.
    static func check(_ url: String, allowPrivate: Bool, tenant: String) throws {
        let target = try WebhookRules.parseURL(url, allowPrivate: allowPrivate)
        if allowPrivate { return }
        if try resolveBounded(target.host, tenant: tenant).contains(where: WebhookRules.isForbiddenAddress) {
            throw DomainError.invalid("url", "url must not resolve to a loopback, private, link-local or unspecified address")
        }
    }
}
