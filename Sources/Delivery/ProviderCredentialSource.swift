import Foundation
import Crypto
import LiveRelayStore
import Logging
import Postgres
import Locking

/// A tenant's decrypted APNs token-auth key (docs/providers.md). Holds a private key: never log it;
/// `description` shows the fingerprint only.
public struct APNsCredential: Sendable, CustomStringConvertible {
    public let teamId: String
    public let keyId: String
    /// Bundle ids this key may push to.
    public let topics: [String]
    /// `sandbox` or `production` (the row it came from).
    public let environment: String
    /// `sha256:<hex>` of the public key (what logs and health reports name).
    public let fingerprint: String
    public let privateKey: P256PrivateKey

    public init(teamId: String, keyId: String, topics: [String], environment: String, privateKey: P256PrivateKey) {
        self.teamId = teamId; self.keyId = keyId; self.topics = topics; self.environment = environment
        self.privateKey = privateKey; self.fingerprint = privateKey.publicKey.fingerprint
    }

    public var description: String { "APNsCredential(team: \(teamId), key: \(keyId), \(environment), \(fingerprint))" }
}

/// A tenant's decrypted FCM service account (docs/providers.md). Holds a private key: never log it.
public struct FCMCredential: Sendable, CustomStringConvertible {
    public let projectId: String
    public let clientEmail: String
    public let privateKeyId: String
    /// OAuth2 token endpoint (`token_uri` of the key file).
    public let tokenURI: String
    public let fingerprint: String
    public let privateKey: RSAPrivateKey

    public init(projectId: String, clientEmail: String, privateKeyId: String, tokenURI: String, privateKey: RSAPrivateKey) {
        self.projectId = projectId; self.clientEmail = clientEmail; self.privateKeyId = privateKeyId; self.tokenURI = tokenURI
        self.privateKey = privateKey; self.fingerprint = privateKey.publicKey.fingerprint
    }

    public var description: String { "FCMCredential(project: \(projectId), \(clientEmail), \(fingerprint))" }
}

/// Everything one tenant has configured.
public struct TenantProviderCredentials: Sendable {
    /// By environment (`sandbox`, `production`).
    public var apns: [String: APNsCredential]
    public var fcm: FCMCredential?
    /// Why a stored credential could not be used (e.g. it does not decrypt under this KEK), by
    /// `apns_<environment>` / `fcm`; never secret.
    public var unusable: [String: String]

    public init(apns: [String: APNsCredential] = [:], fcm: FCMCredential? = nil, unusable: [String: String] = [:]) {
        self.apns = apns; self.fcm = fcm; self.unusable = unusable
    }

    /// The APNs credential for a push: the one of `environment` when it lists `topic`, else
    /// the other environment's when it does (an Apple key is valid in both environments).
    public func apnsCredential(environment: String, topic: String) -> APNsCredential? {
        if let c = apns[environment], c.topics.contains(topic) { return c }
        return apns.values.sorted { $0.environment < $1.environment }.first { $0.topics.contains(topic) }
    }
}

/// Where the provider sender gets credentials and reports their health.
public protocol ProviderCredentialSource: Sendable {
    /// The tenant's decrypted credentials (may be cached by the implementation).
    /// - Throws: when they cannot be read now (e.g. the database is down): nothing was sent.
    func credentials(tenantId: String) throws -> TenantProviderCredentials
    /// A cheap, non-blocking health report (coalesced and written later by the implementation).
    func report(_ report: ProviderCredentialHealthReport)
}

/// Fixed credentials (tests, tools). Keeps every report.
public final class StaticProviderCredentialSource: ProviderCredentialSource {
    private let state: Locked<(creds: [String: TenantProviderCredentials], reports: [ProviderCredentialHealthReport])>

    public init(_ credentials: [String: TenantProviderCredentials] = [:]) { state = Locked((credentials, [])) }

    public func set(_ tenantId: String, _ credentials: TenantProviderCredentials) { state.withLock { $0.creds[tenantId] = credentials } }

    public func credentials(tenantId: String) throws -> TenantProviderCredentials {
        state.withLock { $0.creds[tenantId] } ?? TenantProviderCredentials()
    }

    public func report(_ report: ProviderCredentialHealthReport) { state.withLock { $0.reports.append(report) } }

    /// Every report so far, in order.
    public var reports: [ProviderCredentialHealthReport] { state.withLock { $0.reports } }
}

/// Credentials from PostgreSQL (migration 0004), decrypted with the KEK and cached per tenant
/// for `ttlSeconds` (default 60) at most; a tenant with no credential at all is re-read after 5 s
/// at most. Once `startChangeListener(conninfo:)` runs, a PUT or DELETE on any node reaches this
/// cache through `NOTIFY liverelay_provider_credentials` (payload: the tenant id) within a
/// second, and the lifetime only bounds what a lost listener connection could miss (the
/// listener drops the whole cache when it reconnects). See docs/operations.md "Provider
/// credentials". Health reports are coalesced in memory (latest success and latest failure per
/// credential) and written by `flush()`, which a background thread calls every
/// `flushIntervalSeconds` once `start()` ran.
public final class DatabaseProviderCredentialSource: ProviderCredentialSource, @unchecked Sendable {
    // @unchecked: mutable state is behind the Mutexes; `db`, `kek`, `log` are immutable.
    private struct Entry { let credentials: TenantProviderCredentials; let loadedAt: Date }
    private struct HealthKey: Hashable { let provider: String; let tenantId: String; let environment: String?; let fingerprint: String }

    let db: Database
    let kek: AESGCM
    let log: Logger
    /// Longest time, in seconds, a tenant's loaded credentials are used without reading them
    /// again (the bound when a change notification was missed).
    public let ttlSeconds: Double
    let flushIntervalSeconds: Double
    let now: @Sendable () -> Date
    private let cache = Locked<[String: Entry]>([:])
    private let pending = Locked<[HealthKey: (success: Date?, failure: (Date, String)?)]>([:])
    private let running = Locked<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)
    /// Bumped by every invalidation; a load that overlapped one is not cached (it may be stale).
    private let epoch = Locked<Int>(0)
    private let invalidated = NSCondition()
    private let listening = Locked<(started: Bool, stopping: Bool)>((false, false))
    private let listenerDone = DispatchSemaphore(value: 0)

    public init(
        db: Database, kek: AESGCM, log: Logger, ttlSeconds: Double = 60, flushIntervalSeconds: Double = 5,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.db = db; self.kek = kek; self.log = log; self.ttlSeconds = ttlSeconds
        self.flushIntervalSeconds = flushIntervalSeconds; self.now = now
    }

    public func credentials(tenantId: String) throws -> TenantProviderCredentials {
        let t = now()
        if let e = cache.withLock({ $0[tenantId] }), t >= e.loadedAt {
            // "Nothing configured" is cached briefly only, so a just-added credential works at once.
            let empty = e.credentials.apns.isEmpty && e.credentials.fcm == nil
            if t.timeIntervalSince(e.loadedAt) < (empty ? min(ttlSeconds, 5) : ttlSeconds) { return e.credentials }
        }
        let before = epoch.withLock { $0 }
        let loaded = try load(tenantId)
        cache.withLock { c in
            if epoch.withLock({ $0 }) == before { c[tenantId] = Entry(credentials: loaded, loadedAt: t) }
        }
        return loaded
    }

    /// Drops the cached credentials of `tenantId` (or of every tenant).
    public func invalidate(_ tenantId: String? = nil) {
        cache.withLock { c in
            epoch.withLock { $0 += 1 }
            if let tenantId { c[tenantId] = nil } else { c.removeAll() }
        }
        invalidated.lock()
        invalidated.broadcast()
        invalidated.unlock()
    }

    /// How many invalidations happened so far (`invalidate` calls, including those made by the
    /// change listener). For tests and diagnostics.
    public var invalidationCount: Int { epoch.withLock { $0 } }

    /// Blocks until `invalidationCount` exceeds `count` or `timeoutSeconds` (seconds) passed;
    /// returns whether it did. Lets tests wait for a NOTIFY instead of sleeping.
    public func waitForInvalidation(after count: Int, timeoutSeconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        invalidated.lock()
        defer { invalidated.unlock() }
        while invalidationCount <= count {
            if !invalidated.wait(until: deadline) { return invalidationCount > count }
        }
        return true
    }

    /// Starts a thread that LISTENs on `ProviderCredentialStore.changeChannel` over its own
    /// connection to `conninfo` and drops the cached credentials of each tenant named in a
    /// notification; on (re)connecting it drops the whole cache, since anything may have
    /// changed while it was not listening. Reconnects every second after a failure. Idempotent;
    /// `stop()` ends it.
    public func startChangeListener(conninfo: String) {
        let first = listening.withLock { l -> Bool in
            defer { l.started = true }; return !l.started
        }
        guard first else { return }
        let t = Thread { [self] in
            defer { listenerDone.signal() }
            PostgresConnection.listenLoop(
                conninfo: conninfo, channel: ProviderCredentialStore.changeChannel, isStopping: { listening.withLock { $0.stopping } },
                connected: { invalidate() }, received: { for n in $0 { invalidate(n.payload) } },
                lost: { error in
                    invalidate()
                    log.warning("provider credential listener lost its connection; retrying", ["error": .string("\(error)")])
                })
        }
        t.name = "provider credential changes"
        t.start()
    }

    private func load(_ tenantId: String) throws -> TenantProviderCredentials {
        let (apnsRows, fcmRow) = try db.tenant(tenantId) { c in
            (try ProviderCredentialStore.apnsCredentials(c, tenantId: tenantId), try ProviderCredentialStore.fcmCredential(c, tenantId: tenantId))
        }
        var out = TenantProviderCredentials()
        for r in apnsRows {
            do {
                let pem = try ProviderCredentialStore.openPrivateKey(
                    r.privateKeySealed, kek: kek, tenantId: tenantId, provider: "apns",
                    environment: r.environment)
                out.apns[r.environment] = APNsCredential(
                    teamId: r.teamId, keyId: r.keyId, topics: r.topics, environment: r.environment,
                    privateKey: try P256PrivateKey(pem: pem))
            } catch {
                out.unusable["apns_\(r.environment)"] = "stored APNs key cannot be opened with this LIVERELAY_KEK"
                log.error(
                    "apns credential unusable",
                    [
                        "tenant_id": .string(tenantId), "environment": .string(r.environment),
                        "fingerprint": .string(r.fingerprint)
                    ])
            }
        }
        if let r = fcmRow {
            do {
                let pem = try ProviderCredentialStore.openPrivateKey(
                    r.privateKeySealed, kek: kek, tenantId: tenantId, provider: "fcm", environment: nil)
                out.fcm = FCMCredential(
                    projectId: r.projectId, clientEmail: r.clientEmail, privateKeyId: r.privateKeyId,
                    tokenURI: r.tokenURI, privateKey: try RSAPrivateKey(pem: pem))
            } catch {
                out.unusable["fcm"] = "stored FCM key cannot be opened with this LIVERELAY_KEK"
                log.error("fcm credential unusable", ["tenant_id": .string(tenantId), "fingerprint": .string(r.fingerprint)])
            }
        }
        return out
    }

    public func report(_ report: ProviderCredentialHealthReport) {
        let key = HealthKey(provider: report.provider, tenantId: report.tenantId, environment: report.environment, fingerprint: report.fingerprint)
        pending.withLock { p in
            var v = p[key] ?? (nil, nil)
            if let reason = report.failureReason {
                if v.failure == nil || v.failure!.0 <= report.at { v.failure = (report.at, reason) }
            } else if v.success == nil || v.success! < report.at {
                v.success = report.at
            }
            p[key] = v
        }
    }

    /// Writes the coalesced health reports (one transaction per tenant). Failures are logged
    /// and the reports dropped: health is informational.
    public func flush() {
        let batch = pending.withLock { p -> [HealthKey: (success: Date?, failure: (Date, String)?)] in
            defer { p.removeAll() }
            return p
        }
        var byTenant: [String: [ProviderCredentialHealthReport]] = [:]
        for (k, v) in batch {
            if let s = v.success {
                byTenant[k.tenantId, default: []].append(
                    .init(
                        provider: k.provider, tenantId: k.tenantId, environment: k.environment,
                        fingerprint: k.fingerprint, at: s, failureReason: nil))
            }
            if let (at, reason) = v.failure {
                byTenant[k.tenantId, default: []].append(
                    .init(
                        provider: k.provider, tenantId: k.tenantId, environment: k.environment,
                        fingerprint: k.fingerprint, at: at, failureReason: reason))
            }
        }
        for (tenant, reports) in byTenant {
            do { try db.tenant(tenant) { c in try ProviderCredentialStore.recordHealth(c, reports) } } catch {
                log.warning("provider credential health not recorded", ["tenant_id": .string(tenant), "error": .string("\(error)")])
            }
        }
    }

    /// Starts the background flusher (idempotent).
    public func start() {
        let first = running.withLock { r -> Bool in
            defer { r = true }; return !r
        }
        guard first else { return }
        let t = Thread { [self] in
            while running.withLock({ $0 }) {
                var slept = 0.0
                while slept < flushIntervalSeconds && running.withLock({ $0 }) {
                    Thread.sleep(forTimeInterval: 0.1); slept += 0.1
                }
                flush()
            }
            stopped.signal()
        }
        t.name = "provider credential health"
        t.start()
    }

    /// Stops the flusher after a last flush, and the change listener (idempotent).
    public func stop() {
        let was = running.withLock { r -> Bool in
            defer { r = false }; return r
        }
        if was { stopped.wait() } else { flush() }
        let listened = listening.withLock { l -> Bool in
            defer { l.stopping = true }
            return l.started && !l.stopping
        }
        if listened { _ = listenerDone.wait(timeout: .now() + 2) }
    }
}
