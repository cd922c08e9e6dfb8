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

    /// One fetch in progress; followers block on `done` (no lock held) until the leader finishes.
    final class Flight: Sendable {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<String, Failure>?>(nil)
        func finish(_ r: Result<String, Failure>) {
            result.withLock { $0 = r }
            done.signal()
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

    /// A valid access token for `credential`; after a `401` pass the rejected token as
    /// `replacing` to force a new one (unless another caller already replaced it).
    func accessToken(_ credential: FCMCredential, replacing rejected: String? = nil) throws(Failure) -> String {
        let key = Key(clientEmail: credential.clientEmail, fingerprint: credential.fingerprint, tokenURI: credential.tokenURI)
        enum Role {
            case token(String)
            case failed(Failure)
            case follower(Flight)
            case leader(Flight)
        }
        let t = now()
        let role = state.withLock { s -> Role in
            if let e = s.entries[key], t < e.expiresAt, e.token != rejected { return .token(e.token) }
            if let f = s.failures[key], t < f.until { return .failed(f.failure) }
            if let flight = s.inflight[key] { return .follower(flight) }
            let flight = Flight()
            s.inflight[key] = flight
            return .leader(flight)
        }
        switch role {
        case .token(let token): return token
        case .failed(let f): throw f
        case .follower(let flight):
            if flight.done.wait(timeout: .now() + Self.followerBackstopSeconds) == .timedOut {
                throw .transport(.notProcessed(reason: "the access-token fetch of another sender did not finish in time"))
            }
            flight.done.signal()  // let the next follower through too
            guard let r = flight.result.withLock({ $0 }) else { throw .transport(.notProcessed(reason: "no access-token result")) }
            return try r.get()
        case .leader(let flight):
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
            return try result.get()
        }
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
