import Foundation
import Crypto
import HTTP2
import HTTPServer
import JSON

/// The APNs endpoint: checks as Apple documents ("Sending notification requests to APNs",
/// "Establishing a token-based connection to APNs", "Handling notification responses from
/// APNs", "Starting and updating Live Activities with ActivityKit push notifications"), in this
/// order, answering `{"reason": …}` (plus a sandbox-only `sandbox_detail`):
///
/// | check | answer |
/// | --- | --- |
/// | method POST | 405 MethodNotAllowed |
/// | path token is hex | 400 BadDeviceToken |
/// | `authorization: bearer <JWT>` present | 403 MissingProviderToken |
/// | JWT ES256 with `kid`, `iss` of a registered key, valid signature, integer `iat` not in the future (> 5 min) | 403 InvalidProviderToken |
/// | `iat` younger than 1 hour (sandbox clock) | 403 ExpiredProviderToken |
/// | a new token of that key within 20 min of too many others (see configuration) | 429 TooManyProviderTokenUpdates |
/// | `apns-topic` present | 400 MissingTopic |
/// | topic ends in `.push-type.liveactivity` (and is allowed for the key) | 400 TopicDisallowed |
/// | `apns-push-type: liveactivity` | 400 InvalidPushType |
/// | `apns-priority` 5 or 10 when present | 400 BadPriority |
/// | `apns-expiration` integer when present | 400 BadExpirationDate |
/// | `apns-id` canonical UUID when present | 400 BadMessageId |
/// | body non-empty | 400 PayloadEmpty |
/// | body ≤ 4096 bytes | 413 PayloadTooLarge |
/// | body `{"aps": {timestamp, event, content-state, …}}` of the Live Activity shape | 400 BadPayload (sandbox's name) |
/// | a start's `input-push-channel` names a live channel of the bundle id, and comes without `input-push-token` | 400 BadPayload |
/// | token registered as dead | 410 Unregistered (with `timestamp`) |
/// | injected fault | its status and reason |
/// | otherwise | 200 with `apns-id` |
extension Sandbox {
    static let maxPayloadBytes = 4096
    static let topicSuffix = ".push-type.liveactivity"

    func apnsError(_ status: Int, _ reason: String, detail: String? = nil, headers: [(String, String)] = []) -> HTTP2Response {
        var o: [String: JSONValue] = ["reason": .string(reason)]
        if status == 410 { o["timestamp"] = .int(Int64(configuration.now().timeIntervalSince1970 * 1000)) }
        if let detail { o["sandbox_detail"] = .string(detail) }
        return HTTP2Response(status: status, headers: headers + [("content-type", "application/json")], body: JSONValue.object(o).serialized())
    }

    func handleAPNs(_ request: HTTP2Request, token: String) -> HTTP2Response {
        state.withLock { $0.stats.apnsRequests += 1 }
        var headers: [String: String] = [:]
        for name in ["apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-id"] {
            if let v = request.header(name) { headers[name] = v }
        }
        let apnsId = request.header("apns-id")?.lowercased() ?? SecureRandom.uuidV4()
        var jwt: VerifiedJWT?
        let body = ParsedOnce(request.body)
        func answer(_ status: Int, _ reason: String?, _ detail: String? = nil, extra: [(String, String)] = []) -> HTTP2Response {
            record(provider: "apns", token: token, status: status, reason: reason, headers: headers, jwt: jwt, payload: body.value, detail: detail)
            guard let reason else {
                return HTTP2Response(status: status, headers: [("apns-id", apnsId)])
            }
            return apnsError(status, reason, detail: detail, headers: [("apns-id", apnsId)] + extra)
        }

        guard request.method == "POST" else { return answer(405, "MethodNotAllowed") }
        guard isHex(token) else { return answer(400, "BadDeviceToken", "the device token must be hexadecimal") }

        // Provider token.
        switch authenticate(request) {
        case .failure(let status, let reason, let detail): return answer(status, reason, detail)
        case .verified(let v): jwt = v
        }
        guard let jwt else { return answer(403, "InvalidProviderToken") }

        // Headers.
        guard let topic = request.header("apns-topic"), !topic.isEmpty else { return answer(400, "MissingTopic") }
        guard topic.hasSuffix(Sandbox.topicSuffix), topic.count > Sandbox.topicSuffix.count else {
            return answer(400, "TopicDisallowed", "Live Activity pushes need the topic <bundle id>\(Sandbox.topicSuffix)")
        }
        let bundle = String(topic.dropLast(Sandbox.topicSuffix.count))
        if let allowed = state.withLock({ $0.apnsKeys[jwt.teamId + "." + jwt.keyId]?.topics }), !allowed.contains(bundle) {
            return answer(400, "TopicDisallowed", "this key is not registered for \(bundle)")
        }
        guard request.header("apns-push-type") == "liveactivity" else {
            return answer(400, "InvalidPushType", "apns-push-type must be liveactivity for topic \(topic)")
        }
        if let p = request.header("apns-priority"), p != "5" && p != "10" { return answer(400, "BadPriority", "apns-priority must be 5 or 10") }
        if let e = request.header("apns-expiration"), Int64(e) == nil || Int64(e)! < 0 || Int64(e)! >= 10_000_000_000 {
            return answer(400, "BadExpirationDate", "apns-expiration must be whole epoch seconds")
        }
        if let id = request.header("apns-id"), UUID(uuidString: id) == nil { return answer(400, "BadMessageId") }

        // Body.
        guard !request.body.isEmpty else { return answer(400, "PayloadEmpty") }
        guard request.body.count <= Sandbox.maxPayloadBytes else {
            return answer(413, "PayloadTooLarge", "\(request.body.count) bytes > \(Sandbox.maxPayloadBytes)")
        }
        if let problem = Sandbox.liveActivityPayloadProblem(body.value) { return answer(400, "BadPayload", problem) }
        if let problem = inputPushChannelProblem(body.value, bundle: bundle) { return answer(400, "BadPayload", problem) }

        if state.withLock({ $0.deadTokens.contains(token) }) { return answer(410, "Unregistered") }
        if let injected = injectedFault(provider: "apns", token: token, request, { answer($0, $1, $2, extra: $3) }) { return injected }
        return answer(200, nil)
    }

    static func defaultAPNsReason(_ status: Int) -> String {
        switch status {
        case 400: return "BadDeviceToken"
        case 403: return "InvalidProviderToken"
        case 404: return "BadPath"
        case 410: return "Unregistered"
        case 413: return "PayloadTooLarge"
        case 429: return "TooManyRequests"
        case 503: return "ServiceUnavailable"
        default: return "InternalServerError"
        }
    }

    enum JWTCheck {
        case verified(VerifiedJWT)
        case failure(String, String)
    }
    enum Authentication {
        case verified(VerifiedJWT)
        case failure(status: Int, reason: String, detail: String?)
    }

    /// The provider-token checks every APNs endpoint shares (Apple "Establishing a token-based
    /// connection to APNs"): `authorization: bearer <JWT>` present (403 MissingProviderToken),
    /// valid for a registered (team, key) (403 InvalidProviderToken), younger than 1 hour (403
    /// ExpiredProviderToken), not churned (429 TooManyProviderTokenUpdates).
    func authenticate(_ request: HTTP2Request) -> Authentication {
        guard let auth = request.header("authorization") else { return .failure(status: 403, reason: "MissingProviderToken", detail: nil) }
        guard let bearer = BearerToken.parse(auth) else {
            return .failure(status: 403, reason: "InvalidProviderToken", detail: "authorization must be `bearer <JWT>`")
        }
        let jwt: VerifiedJWT
        switch verifyProviderToken(bearer) {
        case .failure(let reason, let detail): return .failure(status: 403, reason: reason, detail: detail)
        case .verified(let v): jwt = v
        }
        let now = Int64(configuration.now().timeIntervalSince1970.rounded(.down))
        if now - jwt.iat >= 3600 {
            state.withLock {
                $0.stats.expiredProviderTokens += 1; _ = $0.rejectedTokens.insert(bearer)
            }
            return .failure(status: 403, reason: "ExpiredProviderToken", detail: "iat is \(now - jwt.iat) s old (limit 3600)")
        }
        if let churn = trackProviderToken(bearer, jwt) { return .failure(status: 429, reason: "TooManyProviderTokenUpdates", detail: churn) }
        return .verified(jwt)
    }

    func verifyProviderToken(_ token: String) -> JWTCheck {
        if let v = state.withLock({ $0.verified[token] }) { return .verified(v) }
        guard let decoded = try? JWT.decode(token) else { return .failure("InvalidProviderToken", "not a JWT") }
        guard decoded.header["alg"]?.stringValue == "ES256" else { return .failure("InvalidProviderToken", "alg must be ES256") }
        guard let kid = decoded.header["kid"]?.stringValue else { return .failure("InvalidProviderToken", "the JWT header has no kid") }
        guard let iss = decoded.claims["iss"]?.stringValue else { return .failure("InvalidProviderToken", "the JWT has no iss (team id)") }
        guard let iat = decoded.claims["iat"]?.intValue else { return .failure("InvalidProviderToken", "the JWT has no integer iat") }
        guard let key = state.withLock({ $0.apnsKeys[iss + "." + kid] }) else {
            return .failure("InvalidProviderToken", "no key \(kid) is registered for team \(iss)")
        }
        guard JWT.verify(token, key: key.publicKey) != nil else { return .failure("InvalidProviderToken", "bad ES256 signature") }
        let now = Int64(configuration.now().timeIntervalSince1970.rounded(.down))
        if iat > now + 300 { return .failure("InvalidProviderToken", "iat is in the future") }
        let v = VerifiedJWT(teamId: iss, keyId: kid, iat: iat)
        state.withLock { s in
            if s.verified.count > 10_000 { s.verified.removeAll() }
            s.verified[token] = v
        }
        return .verified(v)
    }

    /// The answer to an APNs-style request (a push or a broadcast) when a fault is armed for
    /// `provider` and `token`: takes the fault (one with status 0 is taken and ignored: nil),
    /// notes an injected expiry, and builds the answer through `answer(status, reason, detail,
    /// extra headers)`: a 2xx without a reason, else the fault's reason (default
    /// `defaultAPNsReason`) with `retry-after` when set. Nil when no fault applies.
    func injectedFault(
        provider: String, token: String, _ request: HTTP2Request,
        _ answer: (Int, String?, String?, [(String, String)]) -> HTTP2Response
    ) -> HTTP2Response? {
        guard let f = takeFault(provider: provider, token: token), f.status != 0 else { return nil }
        noteInjectedExpiry(f, request)
        if (200..<300).contains(f.status) { return answer(f.status, nil, nil, []) }
        return answer(
            f.status, f.reason ?? Sandbox.defaultAPNsReason(f.status), "injected fault", f.retryAfter.map { [("retry-after", String($0))] } ?? [])
    }

    /// An injected `403 ExpiredProviderToken` counts like a real one, and its token's successor
    /// is accepted (as after a real expiry).
    func noteInjectedExpiry(_ f: SandboxFault, _ request: HTTP2Request) {
        guard f.status == 403 && f.reason == "ExpiredProviderToken", let auth = request.header("authorization") else { return }
        let bearer = BearerToken.parse(auth) ?? auth
        state.withLock {
            $0.stats.expiredProviderTokens += 1; _ = $0.rejectedTokens.insert(bearer)
        }
    }

    /// Records a provider token's first use; returns why it is churn (→ 429) or nil. A token
    /// that replaces one the sandbox rejected as expired is always accepted.
    func trackProviderToken(_ token: String, _ jwt: VerifiedJWT) -> String? {
        let limit = configuration.providerTokenUpdatesPer20Minutes
        let now = configuration.now()
        return state.withLock { s -> String? in
            if s.seenTokens.contains(token) { return nil }
            let recent = s.stats.providerTokens.filter {
                $0.teamId == jwt.teamId && $0.keyId == jwt.keyId && jwt.iat - $0.issuedAt < 1200 && jwt.iat - $0.issuedAt > -1200
            }
            let replacesRejected = !s.rejectedTokens.isEmpty
            if recent.count >= limit && !replacesRejected {
                s.stats.tooManyProviderTokenUpdates += 1
                return "\(recent.count + 1) tokens of key \(jwt.keyId) within 20 minutes (limit \(limit))"
            }
            s.rejectedTokens.removeAll()
            s.seenTokens.insert(token)
            s.stats.providerTokens.append(SandboxProviderToken(teamId: jwt.teamId, keyId: jwt.keyId, issuedAt: jwt.iat, firstSeenAt: now))
            return nil
        }
    }

    /// Why `payload` (a request body as parsed, nil when it is not JSON) is not an ActivityKit
    /// push payload, or nil.
    static func liveActivityPayloadProblem(_ payload: JSONValue?) -> String? {
        guard let root = payload?.objectValue else { return "the body must be a JSON object" }
        guard let aps = root["aps"]?.objectValue else { return "the body has no aps object" }
        guard let ts = aps["timestamp"]?.intValue, ts >= 0, ts < 10_000_000_000 else { return "aps.timestamp must be whole epoch seconds" }
        guard let event = aps["event"]?.stringValue, ["start", "update", "end"].contains(event) else {
            return "aps.event must be start, update or end"
        }
        guard aps["content-state"]?.objectValue != nil else { return "aps.content-state must be an object" }
        for key in ["stale-date", "dismissal-date"] {
            if let d = aps[key], d.intValue == nil || d.intValue! < 0 || d.intValue! >= 10_000_000_000 {
                return "aps.\(key) must be whole epoch seconds"
            }
        }
        if let r = aps["relevance-score"], r.doubleValue == nil { return "aps.relevance-score must be a number" }
        if let a = aps["alert"] {
            guard let o = a.objectValue, o["title"] != nil, o["body"] != nil else { return "aps.alert must have title and body" }
            if let s = o["sound"], s.stringValue == nil && s.objectValue == nil { return "aps.alert.sound must be a string" }
        }
        if event == "start" {
            guard aps["attributes-type"]?.stringValue?.isEmpty == false else { return "a start needs aps.attributes-type" }
            guard aps["attributes"]?.objectValue != nil else { return "a start needs aps.attributes" }
            guard aps["alert"] != nil else { return "a remote start needs aps.alert" }
        } else if aps["attributes"] != nil || aps["attributes-type"] != nil {
            return "only a start carries attributes"
        }
        return nil
    }

    func isHex(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 1024 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }
    }
}
