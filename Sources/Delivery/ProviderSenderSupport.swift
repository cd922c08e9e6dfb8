import Foundation
import HTTP2
import LiveRelayCore
import Metrics
import Locking

/// Where the provider sender connects (docs/configuration.md configuration) and how.
public struct ProviderEndpoints: Sendable {
    /// `LIVERELAY_APNS_PRODUCTION_URL` (default `https://api.push.apple.com`).
    public var apnsProductionURL: URL
    /// `LIVERELAY_APNS_SANDBOX_URL` (default `https://api.sandbox.push.apple.com`).
    public var apnsSandboxURL: URL
    /// `LIVERELAY_FCM_URL` (default `https://fcm.googleapis.com`). The OAuth token endpoint
    /// comes from each service account's `token_uri`.
    public var fcmURL: URL
    /// `LIVERELAY_APNS_CHANNELS_SANDBOX_URL` (default
    /// `https://api-manage-broadcast.sandbox.push.apple.com:2195`): APNs channel management
    /// (docs/channels.md "APNs wire").
    public var apnsChannelsSandboxURL = URL(string: "https://api-manage-broadcast.sandbox.push.apple.com:2195")!
    /// `LIVERELAY_APNS_CHANNELS_PRODUCTION_URL` (default `https://api-manage-broadcast.push.apple.com:2196`).
    public var apnsChannelsProductionURL = URL(string: "https://api-manage-broadcast.push.apple.com:2196")!
    /// `LIVERELAY_APNS_BROADCAST_SANDBOX_URL` (default `https://api-broadcast.sandbox.push.apple.com`): broadcasts.
    public var apnsBroadcastSandboxURL = URL(string: "https://api-broadcast.sandbox.push.apple.com")!
    /// `LIVERELAY_APNS_BROADCAST_PRODUCTION_URL` (default `https://api-broadcast.push.apple.com`).
    public var apnsBroadcastProductionURL = URL(string: "https://api-broadcast.push.apple.com")!
    /// `LIVERELAY_EXTRA_CA_FILE`: extra trusted CAs (the local sandbox's `ca.pem`).
    public var extraCAFile: String?
    public var connectTimeoutSeconds: Double
    public var requestTimeoutSeconds: Double
    /// HTTP/2 connections per pool (APNs: per (team, key, environment); FCM: per origin).
    public var maxConnectionsPerPool: Int

    public init(
        apnsProductionURL: URL = URL(string: "https://api.push.apple.com")!,
        apnsSandboxURL: URL = URL(string: "https://api.sandbox.push.apple.com")!,
        fcmURL: URL = URL(string: "https://fcm.googleapis.com")!, extraCAFile: String? = nil,
        connectTimeoutSeconds: Double = 10, requestTimeoutSeconds: Double = 30, maxConnectionsPerPool: Int = 4
    ) {
        self.apnsProductionURL = apnsProductionURL; self.apnsSandboxURL = apnsSandboxURL; self.fcmURL = fcmURL
        self.extraCAFile = extraCAFile; self.connectTimeoutSeconds = connectTimeoutSeconds
        self.requestTimeoutSeconds = requestTimeoutSeconds; self.maxConnectionsPerPool = maxConnectionsPerPool
    }

    /// Points the four channel/broadcast URLs at `base` (a local sandbox serves them all on one port).
    public mutating func setChannelURLs(_ base: URL) {
        apnsChannelsSandboxURL = base; apnsChannelsProductionURL = base; apnsBroadcastSandboxURL = base; apnsBroadcastProductionURL = base
    }

    func configuration(_ base: URL) -> HTTP2ClientConfiguration {
        HTTP2ClientConfiguration(
            baseURL: base, extraCAFile: extraCAFile, connectTimeoutSeconds: connectTimeoutSeconds,
            requestTimeoutSeconds: requestTimeoutSeconds)
    }
}

/// `HTTP2Failure` → `PushResult` (docs/write-semantics.md): a TLS failure means nothing was sent.
func pushResult(_ failure: HTTP2Failure) -> PushResult {
    switch failure {
    case .notProcessed(let r): return .notProcessed(r)
    case .tls(let r): return .notProcessed("TLS: \(r)")
    case .possiblyProcessed(let r): return .possiblyProcessed(r)
    }
}

/// Pools by key, created on first use; `replace` swaps in a fresh pool and closes the old one
/// once its in-flight requests must be over (after the request timeout).
final class PoolSet<Key: Hashable & Sendable>: Sendable {
    private let pools = Locked<[Key: HTTP2ConnectionPool]>([:])
    private let closed = Locked(false)

    func pool(_ key: Key, make: () -> HTTP2ConnectionPool) -> HTTP2ConnectionPool {
        pools.withLock { p in
            if let existing = p[key] { return existing }
            let fresh = make()
            p[key] = fresh
            return fresh
        }
    }

    func replace(_ key: Key, old: HTTP2ConnectionPool, graceSeconds: Double) {
        let removed = pools.withLock { p -> Bool in
            guard let current = p[key], current === old else { return false }
            p[key] = nil
            return true
        }
        guard removed else { return }
        let t = Thread {
            Thread.sleep(forTimeInterval: graceSeconds)
            old.close()
        }
        t.name = "retired HTTP/2 pool"
        t.start()
    }

    var count: Int { pools.withLock { $0.count } }

    func closeAll() {
        let all = pools.withLock { p -> [HTTP2ConnectionPool] in
            defer { p.removeAll() }; return Array(p.values)
        }
        for p in all { p.close() }
    }
}

/// `liverelay_provider_responses_total{provider,status,reason}`: one count per provider HTTP
/// response (`provider` `apns`, `fcm`, `fcm_oauth`; `status` the HTTP status; `reason` the
/// APNs `reason` / FCM `errorCode` or `error.status` / OAuth `error`, empty on success) and per
/// transport failure (`status` `none`, `reason` `not_processed` / `possibly_processed` / `tls`).
final class ProviderMetrics: Sendable {
    let responses: Counter

    init(_ registry: MetricsRegistry) {
        responses = registry.counter(
            "liverelay_provider_responses_total",
            help: "APNs/FCM/OAuth responses and transport failures by provider, status and reason",
            labels: ["provider", "status", "reason"])
    }

    func response(_ provider: String, _ status: Int, _ reason: String?) {
        responses.increment([provider, String(status), Self.label(reason)])
    }

    func failure(_ provider: String, _ failure: HTTP2Failure) {
        let reason: String
        switch failure {
        case .notProcessed: reason = "not_processed"
        case .possiblyProcessed: reason = "possibly_processed"
        case .tls: reason = "tls"
        }
        responses.increment([provider, "none", reason])
    }

    /// Bounded label values: provider reasons are short identifiers; anything else is `other`.
    static func label(_ reason: String?) -> String {
        guard let r = reason, !r.isEmpty else { return "" }
        guard r.utf8.count <= 64,
            r.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x5F || $0 == 0x2D || $0 == 0x2E })
        else { return "other" }
        return r
    }
}

/// True for a non-empty even-length hex string of at most 1024 characters (APNs device,
/// push-to-start and activity tokens).
func isHexToken(_ s: String) -> Bool {
    !s.isEmpty && s.utf8.count <= 1024 && s.utf8.count % 2 == 0
        && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }
}
