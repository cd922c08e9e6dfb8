import Foundation
import Crypto
import HTTP2
import HTTPServer
import JSON
import Logging
import Locking

/// Settings of a `Sandbox`.
public struct SandboxConfiguration: Sendable {
    /// Address the APNs/FCM/OAuth HTTP/2 TLS server listens on.
    public var host: String
    /// Its port (0 = ephemeral; default 8443).
    public var port: Int
    /// Address of the HTTP/1.1 JSON control endpoint.
    public var controlHost: String
    /// Its port (0 = ephemeral; default 8444; -1 = no control endpoint).
    public var controlPort: Int
    /// Host name put in URLs the sandbox hands out (`token_uri`, printed env vars); it is also in
    /// the server certificate. Default: `host`, or `127.0.0.1` when `host` is a wildcard.
    public var advertisedHost: String?
    /// Where to write `ca.pem`, `ca-key.pem`, `apns-key.p8`, `apns.json` and
    /// `fcm-service-account.json`; existing keys there are reused. nil = write nothing.
    public var directory: URL?
    /// Ignore keys already in `directory` and make new ones.
    public var fresh: Bool
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` the server announces.
    public var maxConcurrentStreams: Int
    /// How many new APNs provider tokens one (team, key) may start using within 20 minutes (by
    /// `iat`) before the sandbox answers `429 TooManyProviderTokenUpdates`. Apple documents
    /// "no more than once every 20 minutes"; the default 4 tolerates a few LiveRelay worker
    /// processes each minting its own token. Tests set 1 for Apple's strict rule.
    public var providerTokenUpdatesPer20Minutes: Int
    /// Oldest recorded deliveries are dropped beyond this many.
    public var maxRecordedDeliveries: Int
    /// The sandbox clock (JWT age, access-token expiry); injected in tests.
    public var now: @Sendable () -> Date

    public init(
        host: String = "127.0.0.1", port: Int = 8443, controlHost: String = "127.0.0.1", controlPort: Int = 8444,
        advertisedHost: String? = nil, directory: URL? = nil, fresh: Bool = false, maxConcurrentStreams: Int = 1000,
        providerTokenUpdatesPer20Minutes: Int = 4, maxRecordedDeliveries: Int = 100_000,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.host = host; self.port = port; self.controlHost = controlHost; self.controlPort = controlPort
        self.advertisedHost = advertisedHost; self.directory = directory; self.fresh = fresh
        self.maxConcurrentStreams = maxConcurrentStreams
        self.providerTokenUpdatesPer20Minutes = max(1, providerTokenUpdatesPer20Minutes)
        self.maxRecordedDeliveries = max(1, maxRecordedDeliveries); self.now = now
    }

    var publicHost: String {
        if let advertisedHost { return advertisedHost }
        return host == "0.0.0.0" || host == "::" || host.isEmpty ? "127.0.0.1" : host
    }
}

/// A local APNs- and FCM-compatible server for development and tests (docs/configuration.md `liverelay
/// sandbox`, issue 6): HTTP/2 over TLS with its own CA, checking requests the way Apple and
/// Google document them, recording every delivery per device token, and injecting faults.
///
/// One TLS port (default 127.0.0.1:8443, ALPN h2) serves:
/// - `POST /3/device/<hex token>` — APNs (token auth, Live Activity pushes);
/// - `/1/apps/<bundle id>/channels`, `/1/apps/<bundle id>/all-channels`, `POST /4/broadcasts/apps/<bundle id>` —
///   APNs channel management and broadcasts (`SandboxChannels.swift`);
/// - `POST /token` — Google OAuth2 JWT-bearer grant (the demo service account's `token_uri`);
/// - `POST /v1/projects/<project>/messages:send` — FCM HTTP v1.
///
/// The control port (default 127.0.0.1:8444, plain HTTP/1.1, JSON; see `SandboxControl`) lists
/// deliveries and statistics and sets faults, dead tokens and keys.
///
/// Demo credentials: a P-256 APNs key (team `SANDBOXTM1`-style ids) and an RSA service account
/// are generated (or reused from `directory`) and trusted automatically; more keys can be
/// registered with `registerAPNsKey` / `registerServiceAccount` or the control endpoint.
public final class Sandbox: @unchecked Sendable {
    // @unchecked: mutable state is behind `state` (a `Locked`); servers are set once in `start()`.
    public let configuration: SandboxConfiguration
    /// The CA every sandbox server certificate chains to (PEM; trust it via
    /// `LIVERELAY_EXTRA_CA_FILE`).
    public let ca: X509.Identity
    let serverIdentity: X509.Identity
    /// The demo APNs key and its ids.
    public let apnsKey: P256PrivateKey
    public let teamId: String
    public let keyId: String
    /// The demo service account's RSA key and ids.
    public let serviceAccountKey: RSAPrivateKey
    public let projectId: String
    public let clientEmail: String
    public let privateKeyId: String
    /// A random id of this sandbox process (UUID, lowercase). Delivery `sequence` numbers start
    /// at 1 in every process, so a reader that remembers sequence numbers (the simulated phone's
    /// per-token cursor) keys them by this id and starts over when it changes.
    public let runId = UUID().uuidString.lowercased()

    struct APNsKey { let publicKey: P256PublicKey; let topics: Set<String>? }
    struct ServiceAccount { let publicKey: RSAPublicKey; let projectId: String }
    struct AccessToken { let clientEmail: String; let projectId: String; let expiresAt: Date }
    struct VerifiedJWT { let teamId: String; let keyId: String; let iat: Int64 }
    struct State {
        var apnsKeys: [String: APNsKey] = [:]  // "team.key"
        var serviceAccounts: [String: ServiceAccount] = [:]  // client email
        var accessTokens: [String: AccessToken] = [:]
        var verified: [String: VerifiedJWT] = [:]
        var seenTokens: Set<String> = []
        var rejectedTokens: Set<String> = []
        var faults: [(id: Int, fault: SandboxFault)] = []
        var nextFaultId = 1
        var deadTokens: Set<String> = []
        /// APNs broadcast channels by `apns-channel-id` (deleted ones are removed).
        var channels: [String: SandboxChannel] = [:]
        var channelSequence = 0
        var deliveries: [SandboxDelivery] = []
        var sequence = 0
        var stats = SandboxStats()
        var connectionFaults = HTTP2ServerFaults()
    }
    let state = Locked(State())
    let log: Logger
    private var h2: HTTP2Server?
    private var control: HTTPServer?
    /// Files written under `configuration.directory` (name → absolute path), after `start()`.
    public private(set) var files: [String: String] = [:]

    /// Generates (or loads from `configuration.directory`) the CA, server certificate, APNs key
    /// and service account. Nothing listens until `start()`.
    public init(configuration: SandboxConfiguration = SandboxConfiguration(), log: Logger = Logger(minimum: .warning)) throws {
        self.configuration = configuration
        self.log = log
        let loaded = configuration.fresh ? nil : configuration.directory.flatMap { SandboxFiles.load($0) }
        ca = try loaded?.ca ?? X509.makeCertificateAuthority(commonName: "LiveRelay Sandbox CA")
        var hosts = ["localhost", "127.0.0.1", "::1"]
        for h in [configuration.publicHost, configuration.host] where !hosts.contains(h) && h != "0.0.0.0" && h != "::" && !h.isEmpty {
            hosts.append(h)
        }
        serverIdentity = try X509.issueServerCertificate(ca: ca, hosts: hosts)
        apnsKey = loaded?.apnsKey ?? P256PrivateKey.generate()
        teamId = loaded?.teamId ?? "SANDBOXTM1"
        keyId = loaded?.keyId ?? Sandbox.randomAppleId()
        serviceAccountKey = loaded?.serviceAccountKey ?? RSAPrivateKey.generate(bits: 2048)
        projectId = loaded?.projectId ?? "liverelay-sandbox"
        clientEmail = loaded?.clientEmail ?? "liverelay-sandbox@liverelay-sandbox.iam.gserviceaccount.com"
        privateKeyId = loaded?.privateKeyId ?? Digest.sha256Hex(SecureRandom.bytes(16)).prefix(40).description
        registerAPNsKey(teamId: teamId, keyId: keyId, publicKey: apnsKey.publicKey)
        registerServiceAccount(clientEmail: clientEmail, projectId: projectId, publicKey: serviceAccountKey.publicKey)
    }

    static func randomAppleId() -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        return String(SecureRandom.bytes(10).map { alphabet[Int($0) % alphabet.count] })
    }

    // MARK: lifecycle

    /// Listens on both ports and writes the files (the service account's `token_uri` names the
    /// bound port).
    public func start() throws {
        let server = HTTP2Server(
            configuration: HTTP2ServerConfiguration(
                host: configuration.host, port: configuration.port, certificatePEM: serverIdentity.certificatePEM + ca.certificatePEM,
                privateKeyPEM: serverIdentity.privateKeyPEM, maxConcurrentStreams: configuration.maxConcurrentStreams),
            handlerThreads: .connection
        ) { [self] request in
            handle(request)
        }
        try server.start()
        h2 = server
        if configuration.controlPort >= 0 {
            let c = HTTPServer(
                configuration: HTTPServerConfiguration(
                    host: configuration.controlHost, port: configuration.controlPort, threads: 4,
                    maxBodyBytes: 1 << 20),
                router: SandboxControl.router(self), log: { _ in })
            do { try c.start() } catch {
                server.stop()
                throw error
            }
            control = c
        }
        if let dir = configuration.directory {
            files = try SandboxFiles.write(self, to: dir)
        }
    }

    /// Stops both servers. Idempotent.
    public func stop() {
        h2?.stop()
        control?.shutdown(drainTimeoutSeconds: 2)
    }

    /// The TLS port (after `start()`).
    public var port: Int { h2?.port ?? 0 }
    /// The control port (after `start()`; 0 without control endpoint).
    public var controlPort: Int { control?.port ?? 0 }
    /// `https://<host>:<port>`: APNs sandbox/production URL and FCM URL for LiveRelay.
    public var baseURL: String { "https://\(bracketed(configuration.publicHost)):\(port)" }
    /// The OAuth token endpoint (`token_uri`).
    public var tokenURI: String { baseURL + "/token" }
    /// `http://<host>:<controlPort>`.
    public var controlURL: String {
        "http://\(bracketed(configuration.controlHost == "0.0.0.0" ? "127.0.0.1" : configuration.controlHost)):\(controlPort)"
    }

    private func bracketed(_ h: String) -> String { h.contains(":") ? "[\(h)]" : h }

    /// The demo service-account key file (Google's JSON shape; `token_uri` = `tokenURI`).
    public var serviceAccountJSON: JSONValue {
        .object([
            "type": "service_account", "project_id": .string(projectId), "private_key_id": .string(privateKeyId),
            "private_key": .string(serviceAccountKey.pkcs8PEM), "client_email": .string(clientEmail),
            "client_id": "100000000000000000001", "auth_uri": .string(baseURL + "/auth"), "token_uri": .string(tokenURI),
            "universe_domain": "googleapis.com"
        ])
    }

    /// Environment lines that point a LiveRelay process at this sandbox.
    public func environmentLines(caFile: String?) -> [String] {
        var lines = [
            "LIVERELAY_APNS_SANDBOX_URL=\(baseURL)", "LIVERELAY_APNS_PRODUCTION_URL=\(baseURL)", "LIVERELAY_FCM_URL=\(baseURL)",
            "LIVERELAY_APNS_CHANNELS_SANDBOX_URL=\(baseURL)", "LIVERELAY_APNS_CHANNELS_PRODUCTION_URL=\(baseURL)",
            "LIVERELAY_APNS_BROADCAST_SANDBOX_URL=\(baseURL)", "LIVERELAY_APNS_BROADCAST_PRODUCTION_URL=\(baseURL)"
        ]
        if let caFile { lines.append("LIVERELAY_EXTRA_CA_FILE=\(caFile)") }
        return lines
    }

    // MARK: configuration at run time

    /// Trusts an APNs signing key for `(teamId, keyId)`; `topics` nil = any bundle id.
    public func registerAPNsKey(teamId: String, keyId: String, publicKey: P256PublicKey, topics: [String]? = nil) {
        state.withLock { $0.apnsKeys[teamId + "." + keyId] = APNsKey(publicKey: publicKey, topics: topics.map(Set.init)) }
    }

    /// Trusts a service account for the OAuth endpoint.
    public func registerServiceAccount(clientEmail: String, projectId: String, publicKey: RSAPublicKey) {
        state.withLock { $0.serviceAccounts[clientEmail] = ServiceAccount(publicKey: publicKey, projectId: projectId) }
    }

    /// Adds a fault; returns its id.
    @discardableResult
    public func addFault(_ fault: SandboxFault) -> Int {
        state.withLock { s in
            let id = s.nextFaultId
            s.nextFaultId += 1
            s.faults.append((id, fault))
            return id
        }
    }

    /// Removes every fault, including connection faults.
    public func clearFaults() {
        state.withLock {
            $0.faults.removeAll(); $0.connectionFaults = HTTP2ServerFaults()
        }
        h2?.setFaults(HTTP2ServerFaults())
    }

    /// Connection-level faults (GOAWAY after N streams, dropped connection, refused streams,
    /// response delay) for connections' streams that begin afterwards.
    public func setConnectionFaults(_ faults: HTTP2ServerFaults) {
        state.withLock { $0.connectionFaults = faults }
        h2?.setFaults(faults)
    }

    var faultsJSON: JSONValue {
        state.withLock { s in
            let c = s.connectionFaults
            return .object([
                "faults": .array(
                    s.faults.map { f in
                        var o = f.fault.json.objectValue ?? [:]
                        o["id"] = .int(Int64(f.id))
                        return .object(o)
                    }),
                "connection": .object([
                    "goaway_after_streams": c.goawayAfterStreams.map { .int(Int64($0)) } ?? .null,
                    "drop_connection_after_request": c.dropConnectionAfterRequest.map { .int(Int64($0)) } ?? .null,
                    "refuse_streams_after": c.refuseStreamsAfter.map { .int(Int64($0)) } ?? .null,
                    "response_delay_seconds": .double(c.responseDelaySeconds)
                ])
            ])
        }
    }

    /// APNs answers `410 Unregistered`, FCM `404 UNREGISTERED` for `token` from now on.
    public func markDead(_ token: String) { state.withLock { _ = $0.deadTokens.insert(token) } }

    /// Every access token issued so far stops working (FCM answers `401`).
    public func revokeAccessTokens() { state.withLock { $0.accessTokens.removeAll() } }

    /// Recorded deliveries, oldest first; filtered by token and/or provider.
    public func deliveries(token: String? = nil, provider: String? = nil) -> [SandboxDelivery] {
        state.withLock { s in s.deliveries.filter { (token == nil || $0.token == token) && (provider == nil || $0.provider == provider) } }
    }

    /// Counters so far.
    public var stats: SandboxStats { state.withLock { $0.stats } }

    /// Forgets deliveries, statistics, faults, dead tokens, access tokens and channels (keys stay).
    public func reset() {
        state.withLock { s in
            s.deliveries.removeAll(); s.stats = SandboxStats(); s.faults.removeAll(); s.deadTokens.removeAll()
            s.accessTokens.removeAll(); s.seenTokens.removeAll(); s.rejectedTokens.removeAll(); s.verified.removeAll()
            s.channels.removeAll()
            s.connectionFaults = HTTP2ServerFaults()
        }
        h2?.setFaults(HTTP2ServerFaults())
    }

    // MARK: request handling

    func handle(_ request: HTTP2Request) -> HTTP2Response {
        let delay = FaultDelay()
        var response = Sandbox.$faultDelay.withValue(delay) { route(request) }
        response.sendDelaySeconds = delay.seconds
        return response
    }

    /// The latency of the fault `takeFault` took for the request being handled, in seconds: the
    /// server sends the answer that much later (`HTTP2Response.sendDelaySeconds`), so no thread
    /// sleeps and the handler can run on the connection's own thread. Confined to the thread
    /// handling that one request (bound by `handle` for its duration).
    final class FaultDelay: @unchecked Sendable {
        var seconds: Double = 0
    }
    @TaskLocal static var faultDelay: FaultDelay?

    func route(_ request: HTTP2Request) -> HTTP2Response {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        if path == "/token" { return handleToken(request) }
        if path.hasPrefix("/3/device/") { return handleAPNs(request, token: String(path.dropFirst("/3/device/".count))) }
        if path.hasPrefix("/1/apps/"), path.hasSuffix("/channels") || path.hasSuffix("/all-channels") {
            let all = path.hasSuffix("/all-channels")
            let bundle = String(path.dropFirst("/1/apps/".count).dropLast(all ? "/all-channels".count : "/channels".count))
            return handleChannelManagement(request, bundle: bundle, all: all)
        }
        if path.hasPrefix("/4/broadcasts/apps/") { return handleBroadcast(request, bundle: String(path.dropFirst("/4/broadcasts/apps/".count))) }
        if path.hasPrefix("/v1/projects/"), path.hasSuffix("/messages:send") {
            let project = String(path.dropFirst("/v1/projects/".count).dropLast("/messages:send".count))
            return handleFCM(request, project: project)
        }
        return apnsError(404, "BadPath")
    }

    /// Takes the first matching fault (consuming one of its `times`); its delay is added to the
    /// request's answer (`FaultDelay`), which the server sends that much later.
    func takeFault(provider: String, token: String?) -> SandboxFault? {
        let fault = state.withLock { s -> SandboxFault? in
            guard let i = s.faults.firstIndex(where: { $0.fault.matches(provider: provider, token: token) }) else { return nil }
            let f = s.faults[i].fault
            if let times = f.times {
                if times <= 1 { s.faults.remove(at: i) } else { s.faults[i].fault.times = times - 1 }
            }
            return f
        }
        if let d = fault?.delaySeconds, d > 0, let box = Sandbox.faultDelay { box.seconds += d }
        return fault
    }

    func record(
        provider: String, token: String, status: Int, reason: String?, headers: [String: String] = [:],
        jwt: VerifiedJWT? = nil, payload: JSONValue?, detail: String?
    ) {
        let payload = payload ?? .null  // a body that is not JSON is logged as null
        let now = configuration.now()
        state.withLock { s in
            s.sequence += 1
            s.deliveries.append(
                SandboxDelivery(
                    sequence: s.sequence, provider: provider, token: token, status: status, reason: reason,
                    receivedAt: now, headers: headers, jwtIssuedAt: jwt?.iat, jwtKeyId: jwt?.keyId,
                    payload: payload, detail: detail))
            if s.deliveries.count > configuration.maxRecordedDeliveries { s.deliveries.removeFirst(s.deliveries.count / 10) }
        }
    }
}

/// A request body parsed as JSON at most once, when first asked (`value`: nil when it is not
/// JSON; at most 64 levels deep): a provider handler's checks and its delivery log share one
/// parse. One per request, on the request's thread.
final class ParsedOnce {
    private let bytes: [UInt8]
    private var parsed: JSONValue??

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var value: JSONValue? {
        if let p = parsed { return p }
        let p = try? JSONValue.parse(bytes, maxDepth: 64)
        parsed = .some(p)
        return p
    }
}
