import Dispatch
import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres
import Locking
import Synchronization

/// Verifies `Authorization: Bearer <credential>` (docs/credentials.md).
///
/// The token's form and checksum are checked first, without a database read. A verified
/// credential is cached in memory for at most `cacheSeconds` (60), keyed by HMAC-SHA-256 of
/// the token under a per-process random key (never the plaintext), and never past the
/// credential's own expiry. Revocations and suspensions arrive as NOTIFY on
/// `CredentialLookup.invalidationChannel` and evict matching entries at once; if the
/// listening connection is lost, the whole cache is dropped.
public final class Authenticator: Sendable {
    struct Entry {
        let principal: Principal
        let tenantSuspended: Bool
        let usableUntil: Date
    }

    let db: Database
    let log: Logger
    let cacheSeconds: Double
    let cacheKey = SecureRandom.bytes(32)
    /// Cached verifications, and a generation bumped by every invalidation: a verification
    /// is stored only if no invalidation happened since its database read began, so a NOTIFY
    /// that arrives while argon2 runs cannot be overtaken by the stale result.
    struct CacheState {
        var entries: [String: Entry] = [:]
        var generation: UInt64 = 0
    }
    let cache = Locked<CacheState>(CacheState())
    let now: @Sendable () -> Date
    /// The invalidation listener's thread (`startInvalidationListener`).
    let listener = NotificationListener()
    private let listenerConnected = Atomic<Bool>(false)

    /// True while the invalidation listener holds a connection that LISTENs (from then on a
    /// revocation NOTIFY reaches this cache); false before it connects and while it reconnects.
    public var isListening: Bool { listenerConnected.load(ordering: .acquiring) }
    /// Bounds on verifications that miss the cache.
    let limits: AuthLimits
    /// Remembered failures and per-address failure buckets.
    let failures: Locked<FailureTracker>
    /// Verifications in progress, by token HMAC (single flight).
    let flights = Locked<[String: VerificationFlight]>([:])

    /// Maximum cached verifications; past it the cache is cleared (bounded memory).
    static let maxEntries = 100_000

    /// - Parameters:
    ///   - cacheSeconds: how long a verified credential is cached, in seconds (docs/credentials.md: at most 60).
    ///   - now: the clock (injected in tests).
    ///   - limits: bounds on verifications of credentials not in the cache (docs/http-limits.md).
    public init(
        db: Database, log: Logger, cacheSeconds: Double = 60, limits: AuthLimits = AuthLimits(),
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.db = db
        self.log = log
        self.cacheSeconds = cacheSeconds
        self.limits = limits
        self.failures = Locked(FailureTracker(limits: limits))
        self.now = now
    }

    /// Failed verifications remembered right now (for tests and metrics).
    public var rememberedFailures: Int { failures.withLock { t in t.failures.values.filter { $0 > now() }.count } }

    /// Number of cached verifications (for tests and metrics).
    public var cachedCount: Int { cache.withLock { $0.entries.count } }

    /// The principal of `request`.
    ///
    /// A credential in the verification cache is answered at once, before any limit below is
    /// consulted. Otherwise (docs/http-limits.md, "Credential verification"): a client address
    /// whose failure bucket is empty gets 429 (a bucket loses one unit per verification that
    /// read the database and failed); a token that failed within `limits.failureCacheSeconds`
    /// gets 401 again without a database read (and costs its address nothing); concurrent
    /// requests with one token share one verification (single flight); argon2id runs under
    /// `limits.argon2`.
    /// - Throws: `HTTPError` 401 `UNAUTHENTICATED` (missing, malformed, unknown, revoked or
    ///   expired credential, all alike), 403 `TENANT_SUSPENDED`, 429 `RATE_LIMITED` with
    ///   `Retry-After` (seconds) when the client address made too many failed attempts,
    ///   503 `SERVICE_UNAVAILABLE` with `Retry-After: 1` when the database is down or every
    ///   argon2 slot stayed busy.
    public func authenticate(_ request: HTTPRequest) throws -> Principal {
        guard let header = request.header("authorization"), header.count > 7, let tokenText = BearerToken.parse(header) else {
            throw Self.unauthenticated("missing Authorization: Bearer <credential> header")
        }
        guard let token = CredentialToken.parse(tokenText) else { throw Self.unauthenticated("malformed credential") }
        let key = Digest.hmacSHA256Hex(key: cacheKey, data: Array(tokenText.utf8))
        let address = AuthLimits.failureBucket(forAddress: request.remoteAddress ?? "unknown")  // an IPv6 /64 is one bucket
        var waited = false
        while true {
            let t = now()
            let (cached, generation) = cache.withLock { ($0.entries[key], $0.generation) }
            if let e = cached, e.usableUntil > t {
                if e.tenantSuspended { throw Self.suspended() }
                return e.principal
            }
            if failures.withLock({ $0.remembersFailure(key, at: t) }) {
                throw Self.unauthenticated("unknown, revoked or expired credential")
            }
            // Single flight: the first request verifies; the others wait for it, then re-read
            // the caches (the leader stored its outcome in one of them, or failed transiently).
            let (flight, leader) = flights.withLock { f -> (VerificationFlight, Bool) in
                if let existing = f[key] { return (existing, false) }
                let created = VerificationFlight()
                f[key] = created
                return (created, true)
            }
            if !leader {
                guard !waited, flight.wait(seconds: limits.singleFlightWaitSeconds) else { throw Self.busy() }
                waited = true
                continue
            }
            defer {
                flights.withLock { _ = $0.removeValue(forKey: key) }
                flight.finish()
            }
            // One unit of the address's failure bucket per verification that reads the
            // database, given back unless it fails: at most `failuresPerAddress` failed
            // verifications per address and refill period, however many run at once.
            if let retryAfter = failures.withLock({ $0.reserve(address: address, at: t) }) { throw Self.rateLimited(retryAfter) }
            var failed = false
            defer { if !failed { failures.withLock { $0.refund(address: address, at: now()) } } }
            do {
                return try verify(token, key: key, generation: generation, at: t)
            } catch let e as HTTPError where e.status == 401 {
                failed = true
                failures.withLock { $0.rememberFailure(key: key, at: now()) }
                throw e
            }
        }
    }

    /// The leader's part of `authenticate`: database read, argon2id under the limiter, caching.
    private func verify(_ token: CredentialToken, key: String, generation: UInt64, at t: Date) throws -> Principal {
        let stored: StoredCredential?
        do {
            stored = try db.system { c in try CredentialLookup.find(c, token) }
        } catch {
            log.error("credential lookup failed", ["error": .string("\(error)")])
            throw HTTPError(
                status: 503, code: "SERVICE_UNAVAILABLE", message: "the database is unavailable; retry shortly",
                headers: [("Retry-After", "1")])
        }
        var verified = false
        if let s = stored, s.usable {
            do {
                verified = try limits.argon2.run(key: s.tenantId) { CredentialMint.verify(token, hash: s.secretHash) }
            } catch let busy as Argon2idLimiter.Busy {
                throw Self.busy(retryAfter: busy.retryAfterSeconds)
            }
        }
        guard let s = stored, verified else { throw Self.unauthenticated("unknown, revoked or expired credential") }
        let principal = try Self.principal(of: s)
        let until = min(t.addingTimeInterval(cacheSeconds), s.validUntil ?? .distantFuture)
        let suspended = s.tenantStatus == "suspended"
        cache.withLock { c in
            guard c.generation == generation else { return }  // invalidated meanwhile: maybe stale, don't keep
            if c.entries.count >= Self.maxEntries { c.entries.removeAll() }
            c.entries[key] = Entry(principal: principal, tenantSuspended: suspended, usableUntil: until)
        }
        if suspended { throw Self.suspended() }
        return principal
    }

    static func principal(of s: StoredCredential) throws -> Principal {
        switch s.kind {
        case .operator: return .operatorKey(id: s.id)
        case .master: return .master(tenantId: s.tenantId!, keyId: s.id)
        case .sender:
            return .sender(
                tenantId: s.tenantId!,
                scope: SenderScope(
                    keyId: s.id, targets: Set(s.targets), createdFrom: Set(s.createdFrom),
                    permissions: Set(s.permissions.compactMap(Permission.init(rawValue:)))))
        case .publishable: return .publishable(tenantId: s.tenantId!, keyId: s.id, appId: s.appId, platform: s.platform)
        case .installation:
            return .installation(
                tenantId: s.tenantId!, installationId: s.installationId!, credentialId: s.id,
                retired: s.installationStatus == "retired")
        }
    }

    /// Drops cached verifications for `subject`: a credential id, or `tenant:<id>`.
    public func invalidate(_ subject: String) {
        cache.withLock { c in
            c.generation &+= 1
            if subject.hasPrefix("tenant:") {
                let tenant = String(subject.dropFirst(7))
                c.entries = c.entries.filter { $0.value.principal.tenantId != tenant }
            } else if subject == "*" {
                c.entries.removeAll()
            } else {
                c.entries = c.entries.filter { $0.value.principal.keyId != subject }
            }
        }
    }

    /// Starts the background thread that LISTENs for invalidations on its own connection
    /// to `conninfo`, reconnecting every second after a loss (and clearing the cache then).
    public func startInvalidationListener(conninfo: String) {
        listener.start(
            name: "auth-invalidation", conninfo: conninfo, channel: CredentialLookup.invalidationChannel,
            connected: { [self] in
                invalidate("*")  // anything may have been missed while not listening
                listenerConnected.store(true, ordering: .releasing)
            },
            received: { [self] in for n in $0 { invalidate(n.payload) } },
            lost: { [self] error in
                listenerConnected.store(false, ordering: .releasing)
                invalidate("*")
                log.warning("auth invalidation listener lost its connection; retrying", ["error": .string("\(error)")])
            })
    }

    /// Stops the listener thread and waits for it (about 0.25 s, at most 2 s).
    public func stop() {
        listener.stop()
    }

    static func unauthenticated(_ why: String) -> HTTPError {
        HTTPError(status: 401, code: "UNAUTHENTICATED", message: why, headers: [("WWW-Authenticate", "Bearer")])
    }

    /// 429 `RATE_LIMITED`: too many failed authentications from this client address.
    static func rateLimited(_ seconds: Int) -> HTTPError {
        HTTPError(
            status: 429, code: "RATE_LIMITED", message: "too many failed authentications from this address; retry after \(seconds) s",
            details: ["retry_after_seconds": .int(Int64(seconds))], headers: [("Retry-After", String(seconds))])
    }

    /// 503 `SERVICE_UNAVAILABLE`: every credential-verification slot stayed busy.
    static func busy(retryAfter: Int = 1, doing: String = "credential verification") -> HTTPError {
        HTTPError(
            status: 503, code: "SERVICE_UNAVAILABLE", message: "\(doing) is busy; retry shortly",
            headers: [("Retry-After", String(retryAfter))])
    }

    /// The argon2 limiter shared by verifications and `mint` (tests, metrics).
    public var argon2Limiter: Argon2idLimiter { limits.argon2 }

    /// Mints a credential of `kind` (`CredentialMint.make`: its argon2id hash, ~20–60 ms of one
    /// core and 19 MiB) in a slot of the same argon2 limiter as verifications
    /// (docs/http-limits.md "argon2 concurrency"), so registrations, renewals and key creation
    /// cannot run argon2 without bound either. Call it before the request's transaction: the hash
    /// must not hold a pooled database connection while it runs. `tenant`: waiters are served
    /// round robin by tenant (`Argon2idLimiter.run(key:priority:)`), so one tenant's flood
    /// delays another tenant's registration by one run, and always after verifications
    /// (`Priority.issuance`), so it cannot starve any tenant's servers either
    /// (docs/http-limits.md "argon2 concurrency"). `client` (the caller's address) is not part
    /// of the key: one tenant flooding from many addresses would get a turn per address.
    /// - Throws: `HTTPError` 503 `SERVICE_UNAVAILABLE` with `Retry-After` when no slot freed
    ///   within the limiter's wait; `CryptoError` when argon2 fails.
    public func mint(_ kind: CredentialKind, tenant: String, client: String? = nil) throws -> CredentialMint.Minted {
        do {
            return try limits.argon2.run(key: tenant, priority: .issuance) { try CredentialMint.make(kind) }
        } catch let busy as Argon2idLimiter.Busy {
            throw Self.busy(retryAfter: busy.retryAfterSeconds, doing: "credential issuance")
        }
    }

    static func suspended() -> HTTPError {
        HTTPError(status: 403, code: "TENANT_SUSPENDED", message: "this tenant is suspended; contact the operator")
    }
}
