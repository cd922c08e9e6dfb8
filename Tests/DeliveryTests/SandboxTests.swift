import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Crypto
import Delivery
import HTTP2
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelaySandbox
import Logging
import Metrics
import Locking
import XCTest
import LiveRelayTestSupport

/// A settable clock shared by the sender and (optionally offset) the sandbox.
final class SimClock: Sendable {
    private let value: Locked<Date>
    init(_ start: Date = Date()) { value = Locked(start) }
    func now() -> Date { value.withLock { $0 } }
    func advance(_ seconds: Double) { value.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// A sandbox on ephemeral loopback ports plus a `ProviderSender` pointed at it over real TLS
/// and HTTP/2, with the sandbox's demo credentials for tenant `ten_test`.
final class ProviderHarness: @unchecked Sendable {
    static let tenant = "ten_test"
    static let topics = ["com.example.app", "com.example.b", "com.example.c"]
    let clock = SimClock()
    let sandboxOffset = Locked<Double>(0)
    let sandbox: Sandbox
    let source = StaticProviderCredentialSource()
    let metrics = MetricsRegistry()
    let sender: ProviderSender
    let directory: URL
    let endpoints: ProviderEndpoints
    let logs = Locked<[String]>([])

    /// Gives `tenant` a production APNs credential for `com.example.app` whose key the
    /// sandbox does not know (team `TEAMOTHER1`, key `KEYOTHER01`) and returns that key.
    @discardableResult
    func setUnknownAPNsKey(tenant: String) -> P256PrivateKey {
        let unknown = P256PrivateKey.generate()
        source.set(
            tenant,
            TenantProviderCredentials(apns: [
                "production": APNsCredential(
                    teamId: "TEAMOTHER1", keyId: "KEYOTHER01", topics: ["com.example.app"], environment: "production", privateKey: unknown)
            ]))
        return unknown
    }

    init(tokenUpdatesPer20Minutes: Int = 4, maxConnections: Int = 4, requestTimeout: Double = 5) throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("lr-sandbox-\(UUID().uuidString)")
        let clock = self.clock, offset = self.sandboxOffset
        sandbox = try Sandbox(
            configuration: SandboxConfiguration(
                port: 0, controlPort: 0, directory: directory, providerTokenUpdatesPer20Minutes: tokenUpdatesPer20Minutes,
                now: { clock.now().addingTimeInterval(offset.withLock { $0 }) }))
        try sandbox.start()
        let base = URL(string: sandbox.baseURL)!
        var endpoints = ProviderEndpoints(
            apnsProductionURL: base, apnsSandboxURL: base, fcmURL: base, extraCAFile: sandbox.files["ca.pem"],
            connectTimeoutSeconds: 5, requestTimeoutSeconds: requestTimeout, maxConnectionsPerPool: maxConnections)
        endpoints.setChannelURLs(base)
        self.endpoints = endpoints
        source.set(
            Self.tenant,
            TenantProviderCredentials(
                apns: [
                    "sandbox": APNsCredential(
                        teamId: sandbox.teamId, keyId: sandbox.keyId, topics: Self.topics, environment: "sandbox",
                        privateKey: sandbox.apnsKey)
                ],
                fcm: FCMCredential(
                    projectId: sandbox.projectId, clientEmail: sandbox.clientEmail, privateKeyId: sandbox.privateKeyId,
                    tokenURI: sandbox.tokenURI, privateKey: sandbox.serviceAccountKey)))
        let captured = logs
        sender = ProviderSender(
            source: source, endpoints: endpoints, metrics: metrics,
            log: Logger(minimum: .debug, sink: { line in captured.withLock { $0.append(line) } }),
            now: { clock.now() })
    }

    func tearDown() {
        sender.close()
        sandbox.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    static func hexToken(_ seed: String = UUID().uuidString) -> String {
        Digest.sha256Hex(Array(seed.utf8)) + Digest.sha256Hex(Array((seed + "x").utf8))
    }

    func iosPush(
        token: String = ProviderHarness.hexToken(), appId: String = "com.example.app", environment: String = "sandbox",
        tenant: String = ProviderHarness.tenant, body: [UInt8]? = nil, event: PushEvent = .update
    ) -> OutgoingPush {
        let payload =
            body ?? APNsPayload(event: event, timestamp: clock.now(), contentState: ["progress": .double(0.5), "status": "en route"]).bytes()
        return OutgoingPush(
            tenantId: tenant, operationId: "op_\(UUID().uuidString.prefix(8))", platform: "ios", environment: environment,
            appId: appId, deviceToken: token, apnsBody: payload, fcmBody: nil, priority: 10,
            expiration: clock.now().addingTimeInterval(3600), apnsId: UUID().uuidString.lowercased())
    }

    func androidPush(token: String = "fcm-" + UUID().uuidString, body: [UInt8]? = nil, tenant: String = ProviderHarness.tenant) -> OutgoingPush {
        let payload =
            body
            ?? FCMMessage(
                token: token, targetId: "tgt_x", event: .update, revision: 2, timestamp: clock.now(),
                state: ["progress": .double(0.5)], templateVersion: "tv_x", ttlSeconds: 3600
            ).bytes()
        return OutgoingPush(
            tenantId: tenant, operationId: "op_\(UUID().uuidString.prefix(8))", platform: "android", environment: "production",
            appId: "com.example.app", deviceToken: token, apnsBody: nil, fcmBody: payload, priority: 10,
            expiration: clock.now().addingTimeInterval(3600), apnsId: UUID().uuidString.lowercased())
    }

    var logText: String { logs.withLock { $0.joined(separator: "\n") } }

    /// One request to the sandbox's control endpoint: (status, parsed JSON body or null).
    func control(_ method: String, _ path: String, _ body: JSONValue? = nil) -> (Int, JSONValue) {
        var req = URLRequest(url: URL(string: sandbox.controlURL + path)!)
        req.httpMethod = method
        if let body { req.httpBody = Data(body.serialized()); req.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let done = DispatchSemaphore(value: 0)
        let out = Locked<(Int, [UInt8])>((0, []))
        URLSession.shared.dataTask(with: req) { d, r, _ in
            out.withLock { $0 = ((r as? HTTPURLResponse)?.statusCode ?? -1, Array(d ?? Data())) }
            done.signal()
        }.resume()
        done.wait()
        let (s, b) = out.withLock { $0 }
        return (s, (try? JSONValue.parse(b)) ?? .null)
    }
}

/// The sandbox by itself: files, the control endpoint, and its checks against raw requests.
final class SandboxTests: ProviderTestCase {

    /// The sandbox reads `authorization: bearer <token>` with the scheme in any case and the
    /// token's surrounding spaces dropped; another scheme is not a bearer token.
    func testBearerTokenParsing() {
        XCTAssertEqual(BearerToken.parse("bearer abc.def"), "abc.def")
        XCTAssertEqual(BearerToken.parse("Bearer   abc.def \t"), "abc.def")
        XCTAssertEqual(BearerToken.parse("BEARER x"), "x")
        XCTAssertEqual(BearerToken.parse("bearer "), "")
        XCTAssertNil(BearerToken.parse("Basic abc"))
        XCTAssertNil(BearerToken.parse("bearer"))
        XCTAssertNil(BearerToken.parse("bearerabc"))
        XCTAssertNil(BearerToken.parse(""))
    }

    func testWritesFilesThatDescribeTheDemoCredentials() throws {
        for name in ["ca.pem", "ca-key.pem", "apns-key.p8", "apns.json", "fcm-service-account.json", "env"] {
            XCTAssertNotNil(h.sandbox.files[name], name)
        }
        let apns = try JSONValue.parse(String(contentsOfFile: h.sandbox.files["apns.json"]!, encoding: .utf8))
        XCTAssertEqual(apns["team_id"]?.stringValue, h.sandbox.teamId)
        XCTAssertEqual(apns["key_id"]?.stringValue?.count, 10)
        let p8 = try String(contentsOfFile: h.sandbox.files["apns-key.p8"]!, encoding: .utf8)
        XCTAssertEqual(try P256PrivateKey(pem: p8).publicKey.fingerprint, h.sandbox.apnsKey.publicKey.fingerprint)
        let sa = try JSONValue.parse(String(contentsOfFile: h.sandbox.files["fcm-service-account.json"]!, encoding: .utf8))
        XCTAssertEqual(sa["type"]?.stringValue, "service_account")
        XCTAssertEqual(sa["token_uri"]?.stringValue, "https://127.0.0.1:\(h.sandbox.port)/token")
        XCTAssertNoThrow(try RSAPrivateKey(pem: sa["private_key"]!.stringValue!))
        let env = try String(contentsOfFile: h.sandbox.files["env"]!, encoding: .utf8)
        XCTAssertTrue(env.contains("LIVERELAY_EXTRA_CA_FILE=\(h.sandbox.files["ca.pem"]!)"), env)
        // A second sandbox on the same directory reuses the keys (stored credentials stay valid).
        let again = try Sandbox(configuration: SandboxConfiguration(port: 0, controlPort: -1, directory: h.directory))
        XCTAssertEqual(again.keyId, h.sandbox.keyId)
        XCTAssertEqual(again.apnsKey.publicKey.fingerprint, h.sandbox.apnsKey.publicKey.fingerprint)
        XCTAssertEqual(again.serviceAccountKey.publicKey.fingerprint, h.sandbox.serviceAccountKey.publicKey.fingerprint)
    }

    /// An injected `delay_seconds` holds that request's answer, not a thread or the connection
    /// (docs/providers.md "The local sandbox's threads"): on one connection, a push to another
    /// token is answered meanwhile; the delayed push is recorded when it arrives and answered
    /// after its delay.
    func testADelayedFaultHoldsOnlyItsOwnAnswer() throws {
        let conn = try HTTP2Connection(
            configuration: HTTP2ClientConfiguration(
                baseURL: URL(string: h.sandbox.baseURL)!, extraCAFile: h.sandbox.files["ca.pem"], connectTimeoutSeconds: 5, requestTimeoutSeconds: 10)
        )
        defer { conn.close() }
        let jwt = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)],
            claims: ["iss": .string(h.sandbox.teamId), "iat": .int(Int64(h.clock.now().timeIntervalSince1970))],
            algorithm: .es256(h.sandbox.apnsKey))
        let headers: [(String, String)] = [
            ("authorization", "bearer \(jwt)"), ("apns-topic", "com.example.app.push-type.liveactivity"),
            ("apns-push-type", "liveactivity"), ("apns-priority", "10")
        ]
        let body = APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["a": 1]).bytes()
        let slow = ProviderHarness.hexToken(), fast = ProviderHarness.hexToken()
        h.sandbox.addFault(SandboxFault(provider: "apns", token: slow, times: 1, delaySeconds: 1.5))
        let began = Date()
        let slowAnswer = Locked<(status: Int, seconds: Double)?>(nil)
        let slowDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            let r = try? conn.send(HTTP2Request(method: "POST", path: "/3/device/\(slow)", headers: headers, body: body))
            slowAnswer.withLock { $0 = (r?.status ?? 0, Date().timeIntervalSince(began)) }
            slowDone.signal()
        }
        // The delayed push is recorded on arrival, before its answer.
        let deadline = Date().addingTimeInterval(5)
        while h.sandbox.deliveries(token: slow).isEmpty && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertEqual(h.sandbox.deliveries(token: slow).count, 1)
        XCTAssertNil(slowAnswer.withLock { $0 }, "not answered yet")
        XCTAssertEqual(try conn.send(HTTP2Request(method: "POST", path: "/3/device/\(fast)", headers: headers, body: body)).status, 200)
        XCTAssertNil(slowAnswer.withLock { $0 }, "the other token's push was answered while this one waits")
        XCTAssertEqual(slowDone.wait(timeout: .now() + 10), .success)
        let answer = try XCTUnwrap(slowAnswer.withLock { $0 })
        XCTAssertEqual(answer.status, 200)
        XCTAssertGreaterThanOrEqual(answer.seconds, 1.5, "answered after its delay")
    }

    /// Raw HTTP/2 requests the way a sloppy client would make them: each documented check answers.
    func testChecksRequestsTheWayAppleDocuments() throws {
        let conn = try HTTP2Connection(
            configuration: HTTP2ClientConfiguration(
                baseURL: URL(string: h.sandbox.baseURL)!, extraCAFile: h.sandbox.files["ca.pem"], connectTimeoutSeconds: 5, requestTimeoutSeconds: 5))
        defer { conn.close() }
        let iat = Int64(h.clock.now().timeIntervalSince1970)
        let jwt = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)], claims: ["iss": .string(h.sandbox.teamId), "iat": .int(iat)],
            algorithm: .es256(h.sandbox.apnsKey))
        let good = APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["a": 1]).bytes()
        func send(_ headers: [(String, String)], body: [UInt8] = good, token: String = ProviderHarness.hexToken()) throws -> (Int, String?) {
            let r = try conn.send(HTTP2Request(method: "POST", path: "/3/device/\(token)", headers: headers, body: body))
            return (r.status, ProviderOutcome.apnsReason(r.body))
        }
        let base: [(String, String)] = [
            ("authorization", "bearer \(jwt)"), ("apns-topic", "com.example.app.push-type.liveactivity"),
            ("apns-push-type", "liveactivity"), ("apns-priority", "10")
        ]
        XCTAssertEqual(try send(base).0, 200)
        XCTAssertEqual(try send(Array(base.dropFirst())).1, "MissingProviderToken")
        let otherKey = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)], claims: ["iss": .string(h.sandbox.teamId), "iat": .int(iat)],
            algorithm: .es256(P256PrivateKey.generate()))
        XCTAssertEqual(try send([("authorization", "bearer \(otherKey)")] + base.dropFirst()).1, "InvalidProviderToken")
        let old = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)], claims: ["iss": .string(h.sandbox.teamId), "iat": .int(iat - 3601)],
            algorithm: .es256(h.sandbox.apnsKey))
        XCTAssertEqual(try send([("authorization", "bearer \(old)")] + base.dropFirst()).1, "ExpiredProviderToken")
        XCTAssertEqual(try send([base[0], ("apns-topic", "com.example.app"), base[2], base[3]]).1, "TopicDisallowed")
        XCTAssertEqual(try send([base[0], base[1], ("apns-push-type", "alert"), base[3]]).1, "InvalidPushType")
        XCTAssertEqual(try send([base[0], base[1], base[2], ("apns-priority", "1")]).1, "BadPriority")
        XCTAssertEqual(try send(base, body: Array(repeating: 0x20, count: 4097)).0, 413)
        XCTAssertEqual(try send(base, body: Array(#"{"aps":{"event":"update","timestamp":1}}"#.utf8)).1, "BadPayload")
        XCTAssertEqual(try send(base, body: []).1, "PayloadEmpty")
        XCTAssertEqual(try send(base, token: "not-hex").1, "BadDeviceToken")
        let dead = ProviderHarness.hexToken()
        h.sandbox.markDead(dead)
        XCTAssertEqual(try send(base, token: dead).0, 410)
        // Apple's strict rule (1 new token per 20 min) catches a client minting per request.
        let strict = try ProviderHarness(tokenUpdatesPer20Minutes: 1)
        defer { strict.tearDown() }
        let c2 = try HTTP2Connection(
            configuration: HTTP2ClientConfiguration(
                baseURL: URL(string: strict.sandbox.baseURL)!, extraCAFile: strict.sandbox.files["ca.pem"], connectTimeoutSeconds: 5))
        defer { c2.close() }
        var statuses: [Int] = []
        for k in 0..<2 {
            let t = try JWT.sign(
                header: ["kid": .string(strict.sandbox.keyId)],
                claims: ["iss": .string(strict.sandbox.teamId), "iat": .int(iat + Int64(k) * 60)],
                algorithm: .es256(strict.sandbox.apnsKey))
            statuses.append(
                try c2.send(
                    HTTP2Request(
                        method: "POST", path: "/3/device/\(ProviderHarness.hexToken())",
                        headers: [("authorization", "bearer \(t)")] + base.dropFirst(), body: good)
                ).status)
        }
        XCTAssertEqual(statuses, [200, 429])
        XCTAssertEqual(strict.sandbox.stats.tooManyProviderTokenUpdates, 1)
    }

    func testControlEndpointListsDeliveriesAndSetsFaults() throws {
        let token = ProviderHarness.hexToken()
        func call(_ method: String, _ path: String, _ body: JSONValue? = nil) throws -> (Int, JSONValue) { h.control(method, path, body) }
        XCTAssertEqual(
            try call(
                "POST", "/sandbox/faults",
                [
                    "token": .string(token), "status": 429, "reason": "TooManyRequests",
                    "retry_after": 7, "times": 1
                ]
            ).0, 201)
        XCTAssertEqual(h.sender.send(h.iosPush(token: token)), .outcome(.retry(after: 7)))
        if case .outcome(.accepted(let id)) = h.sender.send(h.iosPush(token: token)) { XCTAssertNotNil(id) } else { XCTFail("not accepted") }
        let (status, list) = try call("GET", "/sandbox/deliveries?token=\(token)")
        XCTAssertEqual(status, 200)
        let data = list["data"]?.arrayValue ?? []
        XCTAssertEqual(data.map { $0["status"]?.intValue }, [429, 200])
        XCTAssertEqual(data.first?["headers"]?["apns-topic"]?.stringValue, "com.example.app.push-type.liveactivity")
        XCTAssertEqual(data.last?["payload"]?["aps"]?["event"]?.stringValue, "update")
        XCTAssertEqual(try call("GET", "/sandbox/deliveries?token=\(token)&accepted=true").1["data"]?.arrayValue?.count, 1)
        XCTAssertEqual(try call("POST", "/sandbox/dead-tokens", ["token": .string(token)]).0, 200)
        if case .outcome(.tokenDead(410, "Unregistered")) = h.sender.send(h.iosPush(token: token)) {} else { XCTFail("dead token not 410") }
        XCTAssertEqual(try call("GET", "/sandbox/stats").1["apns_requests"]?.intValue, 3)
        XCTAssertEqual(try call("PUT", "/sandbox/connection-faults", ["refuse_streams_after": 0]).0, 200)
        if case .notProcessed = h.sender.send(h.iosPush()) {} else { XCTFail("refused stream must be notProcessed") }
        XCTAssertEqual(try call("DELETE", "/sandbox/faults").0, 200)
        if case .outcome(.accepted) = h.sender.send(h.iosPush()) {} else { XCTFail("faults not cleared") }
        XCTAssertEqual(try call("POST", "/sandbox/faults", ["status": "x"]).0, 400)
    }
}

/// A test class whose every test gets its own `ProviderHarness` (`h`, made in `setUpWithError`,
/// torn down in `tearDown`).
class ProviderTestCase: XCTestCase {
    var h: ProviderHarness!
    override func setUpWithError() throws { h = try ProviderHarness() }
    override func tearDown() { h?.tearDown() }
}
