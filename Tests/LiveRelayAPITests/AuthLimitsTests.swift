import Foundation
import XCTest
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres
import Locking
import Synchronization

/// docs/http-limits.md, "Credential verification": forged credentials (a public key id, a
/// random secret, a valid checksum) cannot buy argon2 runs without bound, and never delay or
/// refuse a request whose credential is already verified.
final class AuthLimitsTests: TenancyTestCase {
    /// A settable clock for the rate-limit tests.
    final class Clock: Sendable {
        let value = Locked(Date())
        var now: @Sendable () -> Date { { [self] in value.withLock { $0 } } }
        func advance(_ seconds: Double) { value.withLock { $0 = $0.addingTimeInterval(seconds) } }
    }

    /// An `Authenticator` of its own over the test database (its own pool, so a test can
    /// close it to prove that no database read happens).
    func authenticator(_ limits: AuthLimits, clock: Clock? = nil) -> (Authenticator, PostgresPool) {
        let pool = PostgresPool(conninfo: env.conninfo, maxConnections: 8, acquireTimeoutSeconds: 2)
        let logs = env.logs
        let log = Logger(minimum: .debug, sink: { logs.append($0) })
        let auth =
            clock.map { Authenticator(db: Database(pool: pool), log: log, limits: limits, now: $0.now) }
            ?? Authenticator(db: Database(pool: pool), log: log, limits: limits)
        addTeardownBlock { pool.close() }
        return (auth, pool)
    }

    /// A token with `kind` and `id` (public), a random secret and a valid checksum.
    static func forged(_ kind: CredentialKind, id: String) -> String {
        CredentialToken.make(kind: kind, id: id, secretBytes: SecureRandom.bytes(32)).token
    }

    static func request(_ credential: String, from address: String) -> HTTPRequest {
        HTTPRequest(
            method: "GET", path: "/v1/remote-updates/capabilities", headers: ["Authorization": "Bearer \(credential)"],
            remoteAddress: address)
    }

    /// The error `authenticate` throws, nil when it succeeds.
    static func outcome(_ auth: Authenticator, _ req: HTTPRequest) -> HTTPError? {
        do { _ = try auth.authenticate(req); return nil } catch let e as HTTPError { return e } catch {
            return HTTPError(status: 0, code: "unexpected", message: "\(error)")
        }
    }

    func testConcurrentForgersNeverRefuseACachedCredentialFromTheSameAddressAndKeyId() throws {
        let t = try tenant()
        let keyId = CredentialToken.parse(t.publishable)!.id
        let limits = AuthLimits(argon2: Argon2idLimiter(maxConcurrent: 1, maxWaitSeconds: 0.02), failuresPerAddress: 10)
        let (auth, _) = authenticator(limits)
        let address = "127.0.0.1"
        XCTAssertNil(Self.outcome(auth, Self.request(t.publishable, from: address)), "the legitimate credential verifies (and is cached)")

        let stop = Atomic<Bool>(false)
        let statuses = Locked<[Int: Int]>([:])
        let forgers = DispatchGroup()
        for _ in 0..<32 {
            DispatchQueue.global().async(group: forgers) {
                while !stop.load(ordering: .relaxed) {
                    let status = Self.outcome(auth, Self.request(Self.forged(.publishable, id: keyId), from: address))?.status ?? 200
                    statuses.withLock { $0[status, default: 0] += 1 }
                }
            }
        }
        var refused: [String] = []
        for _ in 0..<300 {
            if let e = Self.outcome(auth, Self.request(t.publishable, from: address)) { refused.append("\(e.status) \(e.code)") }
        }
        // Keep the forgers going until the address is rate limited, so the legitimate calls
        // above overlapped forgers in every state (verifying, busy, limited).
        let end = Date().addingTimeInterval(20)
        while statuses.withLock({ $0[429] ?? 0 }) == 0, Date() < end { Thread.sleep(forTimeInterval: 0.01) }
        for _ in 0..<100 {
            if let e = Self.outcome(auth, Self.request(t.publishable, from: address)) { refused.append("\(e.status) \(e.code)") }
        }
        stop.store(true, ordering: .relaxed)
        forgers.wait()
        XCTAssertEqual(refused, [], "the cached legitimate credential was refused")
        let seen = statuses.withLock { $0 }
        XCTAssertNil(seen[200], "a forged credential authenticated")
        XCTAssertGreaterThan(seen[429] ?? 0, 0, "the forgers' address was rate limited: \(seen)")
        XCTAssertEqual(Set(seen.keys).subtracting([401, 429, 503]), [], "forgers only ever see 401, 429 or 503: \(seen)")
        XCTAssertLessThanOrEqual(
            limits.argon2.totalRuns, 10 + 1, "argon2 ran only for the failures the address was allowed (plus the legitimate one)")
    }

    func testFailedVerificationIsRememberedWithoutAnotherDatabaseRead() throws {
        let t = try tenant()
        let keyId = CredentialToken.parse(t.master)!.id
        let clock = Clock()
        let (auth, pool) = authenticator(AuthLimits(failureCacheSeconds: 30), clock: clock)
        let bad = Self.forged(.master, id: keyId)
        XCTAssertEqual(Self.outcome(auth, Self.request(bad, from: "127.0.0.1"))?.code, "UNAUTHENTICATED")
        XCTAssertEqual(auth.rememberedFailures, 1)
        pool.close()  // from here on, any database read answers 503
        clock.advance(29)
        XCTAssertEqual(
            Self.outcome(auth, Self.request(bad, from: "127.0.0.1"))?.status, 401, "the remembered failure is answered without the database")
        XCTAssertEqual(
            Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "127.0.0.1"))?.status, 503,
            "another forged token does read the database (here: closed)")
        clock.advance(1.5)
        XCTAssertEqual(auth.rememberedFailures, 0, "failures are forgotten after 30 s")
        XCTAssertEqual(Self.outcome(auth, Self.request(bad, from: "127.0.0.1"))?.status, 503, "an expired failure reads the database again")
        XCTAssertFalse(env.logText.contains(bad), "the forged token is never logged")
    }

    func testFailedAuthenticationsPerAddressRateLimitedAtTheBoundary() throws {
        let t = try tenant()
        let keyId = CredentialToken.parse(t.master)!.id
        let clock = Clock()
        let (auth, _) = authenticator(AuthLimits(failuresPerAddress: 3, failureRefillSeconds: 60), clock: clock)
        XCTAssertNil(Self.outcome(auth, Self.request(t.master, from: "10.0.0.1")), "cached before the forgers start")
        for i in 1...3 {
            XCTAssertEqual(
                Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "10.0.0.1"))?.status, 401, "failure \(i) of 3 is a plain 401")
        }
        let limited = Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "10.0.0.1"))
        XCTAssertEqual(limited?.status, 429)
        XCTAssertEqual(limited?.code, "RATE_LIMITED")
        XCTAssertEqual(limited?.headers.first { $0.0 == "Retry-After" }?.1, "60")
        XCTAssertNil(Self.outcome(auth, Self.request(t.master, from: "10.0.0.1")), "the cached credential is not limited, even from that address")
        XCTAssertEqual(
            Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "10.0.0.2"))?.status, 401, "another address is not limited")
        XCTAssertEqual(
            Self.outcome(auth, Self.request(t.publishable, from: "10.0.0.1"))?.status, 429,
            "a credential not yet verified from the limited address waits too")
        clock.advance(60)
        XCTAssertEqual(
            Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "10.0.0.1"))?.status, 401, "one failure refilled after 60 s")
        XCTAssertEqual(Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "10.0.0.1"))?.status, 429)
    }

    /// Failures from one IPv6 /64 share one bucket (`AuthLimits.failureBucket`): rotating the
    /// interface id buys no more argon2 runs; the next /64 has its own bucket.
    func testFailuresFromOneIPv6Slash64ShareABucket() throws {
        let t = try tenant()
        let keyId = CredentialToken.parse(t.master)!.id
        let (auth, _) = authenticator(AuthLimits(failuresPerAddress: 2, failureRefillSeconds: 60), clock: Clock())
        for i in 1...2 {
            XCTAssertEqual(
                Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "2001:db8:7:1::\(i)"))?.status, 401, "failure \(i) of 2")
        }
        XCTAssertEqual(
            Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "2001:db8:7:1::99"))?.status, 429,
            "another address of the same /64 finds the bucket empty")
        XCTAssertEqual(
            Self.outcome(auth, Self.request(Self.forged(.master, id: keyId), from: "2001:db8:7:2::1"))?.status, 401, "the next /64 is not limited")
    }

    func testArgon2BusyAnswers503WithRetryAfter() throws {
        let t = try tenant()
        let limiter = Argon2idLimiter(maxConcurrent: 1, maxWaitSeconds: 0)
        let (auth, _) = authenticator(AuthLimits(argon2: limiter))
        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? limiter.run {
                holding.signal(); release.wait()
            }
        }
        holding.wait()
        let e = Self.outcome(auth, Self.request(t.master, from: "127.0.0.1"))
        release.signal()
        XCTAssertEqual(e?.status, 503)
        XCTAssertEqual(e?.code, "SERVICE_UNAVAILABLE")
        XCTAssertEqual(e?.headers.first { $0.0 == "Retry-After" }?.1, "1")
        XCTAssertNil(Self.outcome(auth, Self.request(t.master, from: "127.0.0.1")), "verifies once a slot is free")
    }

    /// Minting a credential runs argon2id too (19 MiB, one core for ~20–60 ms): an installation
    /// registration (publishable key, so anyone holding the app) and a sender-key creation take a
    /// slot of the same limiter as verifications, before their transaction, and answer 503 with
    /// `Retry-After` when none frees in time, instead of running argon2 without bound while
    /// holding a pooled connection.
    func testMintingTakesAnArgon2SlotAndAnswers503WhenNoneFrees() throws {
        let t = try tenant()
        XCTAssertEqual(call("GET", "/v1/remote-updates/sender-keys", as: t.master).status, 200)  // cache the master key
        XCTAssertEqual(call("GET", "/v1/remote-updates/capabilities", as: t.publishable).status, 200)  // and the publishable key
        let limiter = env.api.auth.argon2Limiter
        let before = limiter.totalRuns
        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        for _ in 0..<limiter.maxConcurrent {
            DispatchQueue.global().async {
                _ = try? limiter.run {
                    holding.signal(); release.wait()
                }
            }
        }
        for _ in 0..<limiter.maxConcurrent { holding.wait() }
        let registration: JSONValue = [
            "platform": "android", "app_id": "com.example.app", "environment": "production",
            "install_id": .string(UUID().uuidString.lowercased())
        ]
        let busy = env.call("POST", "/v1/installations", registration, as: t.publishable)
        let busyKey = call(
            "POST", "/v1/remote-updates/sender-keys",
            ["targets": [.string(Identifier.make(.startTarget))], "permissions": ["activities:update"], "idempotency_key": "k1"], as: t.master)
        for _ in 0..<limiter.maxConcurrent { release.signal() }
        XCTAssertEqual(busy.status, 503, String(decoding: busy.raw, as: UTF8.self))
        XCTAssertEqual(busy.errorCode, "SERVICE_UNAVAILABLE")
        XCTAssertEqual(busy.headers["retry-after"], "1")
        XCTAssertEqual(busyKey.status, 503)
        XCTAssertEqual(limiter.totalRuns - before, limiter.maxConcurrent, "no argon2 ran beyond the held slots")
        let registered = env.call("POST", "/v1/installations", registration, as: t.publishable)
        XCTAssertEqual(registered.status, 201, String(decoding: registered.raw, as: UTF8.self))
        XCTAssertEqual(limiter.totalRuns - before, limiter.maxConcurrent + 1, "the registration's argon2 ran in a slot")
    }

    func testConcurrentRequestsOfAnUncachedCredentialRunArgon2Once() throws {
        let t = try tenant()
        let limiter = Argon2idLimiter(maxConcurrent: 4, maxWaitSeconds: 5)
        let (auth, _) = authenticator(AuthLimits(argon2: limiter))
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            if let e = Self.outcome(auth, Self.request(t.master, from: "127.0.0.1")) { failures.withLock { $0.append(e.code) } }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertEqual(limiter.totalRuns, 1, "one argon2 verification served all 16 concurrent requests")
    }

    func testRateLimitOverHTTPUsesTheErrorEnvelope() throws {
        let t = try tenant()
        let keyId = CredentialToken.parse(t.master)!.id
        XCTAssertEqual(call("GET", "/v1/remote-updates/sender-keys", as: t.master).status, 200)
        for _ in 0..<AuthLimits().failuresPerAddress {
            XCTAssertEqual(env.call("GET", "/v1/remote-updates/sender-keys", as: Self.forged(.master, id: keyId)).status, 401)
        }
        // The bucket refills one failure per 3 s of wall clock: on a loaded machine the burst
        // above can take longer than that, so a refilled failure or two may still get 401
        // before the limit answers; a few more forged requests must then reach it.
        var r = env.call("GET", "/v1/remote-updates/sender-keys", as: Self.forged(.master, id: keyId))
        for _ in 0..<10 where r.status == 401 {
            r = env.call("GET", "/v1/remote-updates/sender-keys", as: Self.forged(.master, id: keyId))
        }
        XCTAssertEqual(r.status, 429)
        XCTAssertEqual(r.errorCode, "RATE_LIMITED")
        XCTAssertNotNil(r.headers["retry-after"])
        XCTAssertEqual(r["error"]?["request_id"]?.stringValue, r.headers["x-request-id"])
        XCTAssertEqual(call("GET", "/v1/remote-updates/sender-keys", as: t.master).status, 200, "the cached master key still works")
    }
}

/// `AuthLimits.failureBucket(forAddress:)`: which addresses share a failed-authentication bucket
/// (docs/http-limits.md "Credential verification"). Pure, no I/O.
final class FailureBucketTests: XCTestCase {
    func testAnIPv4AddressIsItsOwnBucket() {
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: "192.0.2.1"), "192.0.2.1")
        XCTAssertNotEqual(AuthLimits.failureBucket(forAddress: "192.0.2.1"), AuthLimits.failureBucket(forAddress: "192.0.2.2"))
    }

    func testIPv6AddressesOfOneSlash64ShareABucket() {
        let a = AuthLimits.failureBucket(forAddress: "2001:db8:1:2::1")
        XCTAssertEqual(a, "2001:db8:1:2::/64")
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: "2001:0db8:0001:0002:ffff:eeee:dddd:cccc"), a, "any interface id, any spelling")
        XCTAssertNotEqual(AuthLimits.failureBucket(forAddress: "2001:db8:1:3::1"), a, "the next /64 is another bucket")
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: "::1"), "0:0:0:0::/64")
    }

    func testAnIPv4MappedAddressIsItsIPv4Address() {
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: "::ffff:192.0.2.1"), "192.0.2.1")
    }

    func testAnythingElseIsKeptAsItIs() {
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: "unknown"), "unknown")
        XCTAssertEqual(AuthLimits.failureBucket(forAddress: ""), "")
    }
}
