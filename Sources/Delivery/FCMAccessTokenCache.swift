import Foundation
import Crypto
import HTTP2
import JSON
import LiveRelayCore
import Locking
import Synchronization
import Dispatch

/// OAuth2 access tokens for FCM HTTP v1 (docs/providers.md; Google "Using OAuth 2.0 for Server to Server
/// Applications"): an RS256 JWT assertion `{iss: client_email, scope:
/// https://www.googleapis.com/auth/firebase.messaging, aud: token_uri, iat, exp: iat + 3600}`
/// (header `{alg: RS256, typ: JWT, kid: private_key_id}`) POSTed form-encoded
/// (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=…`) to the service
/// account's `token_uri`; the answer `{access_token, expires_in}` is cached until 5 minutes
/// before it expires. Single-flight per service account: the first caller fetches while
/// concurrent callers wait for its result (100 sends → 1 token request); no lock is held across
/// the network request, and a failed fetch is remembered for `failureCacheSeconds` so a broken
/// or slow token endpoint costs one request per interval, not one per push (docs/security.md
/// "Provider credentials"). A `token_uri` outside `TokenURIPolicy` is never contacted.
public final class FCMAccessTokenCache: Sendable {
    struct Key: Hashable, Sendable { let clientEmail: String; let fingerprint: String; let tokenURI: String }
    struct Entry { let token: String; let expiresAt: Date }
    struct Origin: Hashable, Sendable { let scheme: String; let host: String; let port: Int }

    /// Why no token could be had; the push itself was not sent.
    enum Failure: Error, Sendable {
        /// The token endpoint could not be reached / did not answer.
        case transport(HTTP2Failure)
        /// The token endpoint answered without a token.
        case rejected(status: Int, error: String?, retryAfter: String?)
    }

    /// One fetch in progress. Blocking followers wait on `done` (no lock held); callbacks given
    /// to `whenDone` run when the leader finishes (at once when it already has).
    final class Flight: Sendable {
        let done = DispatchSemaphore(value: 0)
        private let state = Locked<(result: Result<String, Failure>?, waiters: [@Sendable (Result<String, Failure>) -> Void])>((nil, []))
        var result: Result<String, Failure>? { state.withLock { $0.result } }
        func finish(_ r: Result<String, Failure>) {
            let waiters = state.withLock { s -> [@Sendable (Result<String, Failure>) -> Void] in
                s.result = r
                defer { s.waiters = [] }
                return s.waiters
            }
            done.signal()
            for w in waiters { w(r) }
        }
        func whenDone(_ w: @escaping @Sendable (Result<String, Failure>) -> Void) {
            let r = state.withLock { s -> Result<String, Failure>? in
                if let r = s.result { return r }
                s.waiters.append(w)
                return nil
            }
            if let r { w(r) }
        }
    }

    struct State {
        var entries: [Key: Entry] = [:]
        var inflight: [Key: Flight] = [:]
        var failures: [Key: (failure: Failure, until: Date)] = [:]
    }

    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// Tokens are used until this many seconds before `expires_in` ends.
    public static let refreshMarginSeconds: Double = 300
    /// A failed token fetch answers every caller for this many seconds before the next try.
    public static let failureCacheSeconds: Double = 5
    /// Longest a caller waits for another caller's fetch, seconds (the fetch has its own timeouts).
    static let followerBackstopSeconds: Double = 120

    let endpoints: ProviderEndpoints
    let metrics: ProviderMetrics
    let now: @Sendable () -> Date
    private let state = Locked(State())
    private let pools = PoolSet<Origin>()
    private let requests = Atomic<Int>(0)

    init(endpoints: ProviderEndpoints, metrics: ProviderMetrics, now: @escaping @Sendable () -> Date) {
        self.endpoints = endpoints; self.metrics = metrics; self.now = now
    }

    /// Token requests sent so far (tests, diagnostics).
    public var tokenRequestCount: Int { requests.load(ordering: .relaxed) }

    private enum Role {
        case token(String)
        case failed(Failure)
        case follower(Flight)
        case leader(Flight)
    }

    /// What a caller for `credential` does now: use the cached token or failure, wait for the
    /// fetch in progress, or lead a new one.
    private func role(_ credential: FCMCredential, replacing rejected: String?) -> (Key, Role) {
        let key = Key(clientEmail: credential.clientEmail, fingerprint: credential.fingerprint, tokenURI: credential.tokenURI)
        let t = now()
        let role = state.withLock { s -> Role in
            if let e = s.entries[key], t < e.expiresAt, e.token != rejected { return .token(e.token) }
            if let f = s.failures[key], t < f.until { return .failed(f.failure) }
            if let flight = s.inflight[key] { return .follower(flight) }
            let flight = Flight()
            s.inflight[key] = flight
            return .leader(flight)
        }
        return (key, role)
    }

    /// A valid access token for `credential`, blocking the caller while a token is fetched
    /// (`ProviderProbe`); after a `401` pass the rejected token as `replacing` to force a new
    /// one (unless another caller already replaced it). Senders use the callback form.
    func accessToken(_ credential: FCMCredential, replacing rejected: String? = nil) throws(Failure) -> String {
        let (key, role) = role(credential, replacing: rejected)
        switch role {
        case .token(let token): return token
        case .failed(let f): throw f
        case .follower(let flight):
            if flight.done.wait(timeout: .now() + Self.followerBackstopSeconds) == .timedOut {
                throw .transport(.notProcessed(reason: "the access-token fetch of another sender did not finish in time"))
            }
            flight.done.signal()  // let the next follower through too
            guard let r = flight.result else { throw .transport(.notProcessed(reason: "no access-token result")) }
            return try r.get()
        case .leader(let flight):
            return try lead(flight, key: key, credential: credential).get()
        }
    }

    /// `accessToken` without blocking: `completion` gets the token or the failure — on the
    /// caller's thread when the cache answers, else on the thread of the fetch, which runs on a
    /// global queue (one per service account at a time; later callers join it). So a send never
    /// holds the dispatcher's shared submitter threads while Google's token endpoint answers
    /// (docs/providers.md "FCM access tokens"): until 2026-12-05 a cold or expiring token made
    /// every submitter wait for it, and every tenant's pushes with them.
    func accessToken(
        _ credential: FCMCredential, replacing rejected: String? = nil, completion: @escaping @Sendable (Result<String, Failure>) -> Void
    ) {
        let (key, role) = role(credential, replacing: rejected)
        switch role {
        case .token(let token): completion(.success(token))
        case .failed(let f): completion(.failure(f))
        case .follower(let flight): flight.whenDone(completion)
        case .leader(let flight):
            flight.whenDone(completion)
            DispatchQueue.global().async { [self] in _ = lead(flight, key: key, credential: credential) }
        }
    }

    /// The leader's fetch: stores the token (or the failure, for `failureCacheSeconds`), ends
    /// the flight and returns its result.
    private func lead(_ flight: Flight, key: Key, credential: FCMCredential) -> Result<String, Failure> {
        let fetchedAt = now()
        let result: Result<String, Failure>
        do {
            let (token, expiresIn) = try fetch(credential, at: fetchedAt)
            let margin = min(Self.refreshMarginSeconds, expiresIn / 2)
            let entry = Entry(token: token, expiresAt: fetchedAt.addingTimeInterval(expiresIn - margin))
            state.withLock { s in
                s.entries[key] = entry
                s.failures[key] = nil
                s.inflight[key] = nil
            }
            result = .success(token)
        } catch {
            let until = now().addingTimeInterval(Self.failureCacheSeconds)
            state.withLock { s in
                s.failures[key] = (error, until)
                s.inflight[key] = nil
            }
            result = .failure(error)
        }
        flight.finish(result)
        return result
    }

    private func fetch(_ c: FCMCredential, at date: Date) throws(Failure) -> (String, Double) {
        guard let url = URL(string: c.tokenURI), let scheme = url.scheme?.lowercased(), let host = url.host else {
            throw .rejected(status: 0, error: "invalid token_uri", retryAfter: nil)
        }
        // Stored before the upload check existed, or edited in the database: still never contacted.
        guard TokenURIPolicy.allows(c.tokenURI, fcmURL: endpoints.fcmURL.absoluteString) else {
            throw .rejected(status: 0, error: "token_uri not allowed", retryAfter: nil)
        }
        let iat = Int64(date.timeIntervalSince1970.rounded(.down))
        let assertion: String
        do {
            assertion = try JWT.sign(
                header: ["typ": "JWT", "kid": .string(c.privateKeyId)],
                claims: [
                    "iss": .string(c.clientEmail), "scope": .string(Self.scope), "aud": .string(c.tokenURI),
                    "iat": .int(iat), "exp": .int(iat + 3600)
                ],
                algorithm: .rs256(c.privateKey))
        } catch {
            throw .rejected(status: 0, error: "cannot sign assertion", retryAfter: nil)
        }
        let origin = Origin(scheme: scheme, host: host, port: url.port ?? (scheme == "https" ? 443 : 80))
        let pool = pools.pool(origin) {
            var base = URLComponents()
            base.scheme = scheme; base.host = host; base.port = url.port
            return HTTP2ConnectionPool(configuration: endpoints.configuration(base.url!), maxConnections: 1)
        }
        var path = url.path.isEmpty ? "/" : url.path
        if let q = url.query { path += "?" + q }
        // The assertion is base64url plus dots: nothing to percent-encode.
        let form = "grant_type=" + Self.grantType.replacingOccurrences(of: ":", with: "%3A") + "&assertion=" + assertion
        let request = HTTP2Request(
            method: "POST", path: path, headers: [("content-type", "application/x-www-form-urlencoded")],
            body: Array(form.utf8))
        requests.wrappingAdd(1, ordering: .relaxed)
        let response: HTTP2Response
        do { response = try pool.send(request) } catch let f as HTTP2Failure {
            metrics.failure("fcm_oauth", f)
            throw .transport(f)
        } catch {
            throw .transport(.notProcessed(reason: "\(error)"))
        }
        let json = try? JSONValue.parse(response.body, maxDepth: 8)
        let error = json?["error"]?.stringValue
        metrics.response("fcm_oauth", response.status, response.status < 300 ? nil : error)
        guard (200..<300).contains(response.status), let token = json?["access_token"]?.stringValue, !token.isEmpty else {
            throw .rejected(status: response.status, error: error ?? "no access_token", retryAfter: response.header("retry-after"))
        }
        let expiresIn = Double(json?["expires_in"]?.intValue ?? 3600)
        return (token, max(1, expiresIn))
    }

    func close() { pools.closeAll() }
}
