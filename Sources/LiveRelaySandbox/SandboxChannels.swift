import Foundation
import Crypto
import HTTP2
import JSON

/// One APNs broadcast channel the sandbox created (Apple "Sending channel management requests to APNs").
public struct SandboxChannel: Sendable, Equatable {
    /// `apns-channel-id`: base64 of 16 random bytes.
    public let id: String
    public let bundleId: String
    /// `message-storage-policy`: 0 No Message Stored, 1 Most Recent Message Stored.
    public let storagePolicy: Int
    public let createdAt: Date
    /// Creation order within this sandbox process (lists are in this order).
    public let sequence: Int

    var json: JSONValue {
        .object([
            "channel_id": .string(id), "bundle_id": .string(bundleId), "message_storage_policy": .int(Int64(storagePolicy)),
            "created_at": .string(isoFormat(createdAt))
        ])
    }
}

/// APNs channel management and broadcasts on the sandbox's TLS port, checked as Apple documents
/// ("Sending channel management requests to APNs", "Sending broadcast push notification
/// requests to APNs", "Handling error responses from Apple Push Notification service"), in this
/// order, answering `{"reason": …}` with `apns-request-id` (echoed, or a new UUID).
///
/// Channel management, `/1/apps/<bundle id>/channels` (POST create, GET read, DELETE) and
/// `/1/apps/<bundle id>/all-channels` (GET):
///
/// | check | answer |
/// | --- | --- |
/// | method POST/GET/DELETE (all-channels: GET) | 405 MethodNotAllowed |
/// | provider token (as for pushes) | 403 MissingProviderToken / InvalidProviderToken / ExpiredProviderToken, 429 TooManyProviderTokenUpdates |
/// | the key is registered for the bundle id | 400 FeatureNotEnabled |
/// | create: body a JSON object | 400 BadPayload (sandbox's name) |
/// | create: `push-type` present | 400 MissingPushType |
/// | create: `push-type` is `LiveActivity` | 400 InvalidPushType |
/// | create: `message-storage-policy` is 0 or 1 | 400 BadMessageStoragePolicy |
/// | create: fewer than `maxChannelsPerBundle` (10,000) channels | 400 CannotCreateChannelConfig |
/// | read/delete: `apns-channel-id` present | 400 MissingChannelId |
/// | read/delete: it is base64 of at most 64 characters | 400 BadChannelId |
/// | read/delete: the channel exists for this bundle id | 400 ChannelNotRegistered |
/// | injected fault (`provider: "channels"`, `token`: channel id) | its status and reason |
/// | otherwise | create 201 + `apns-channel-id`; read 200 `{"message-storage-policy", "push-type"}`; delete 204; all-channels 200 `{"channels": [id…]}` |
///
/// Broadcasts, `POST /4/broadcasts/apps/<bundle id>`:
///
/// | check | answer |
/// | --- | --- |
/// | method POST | 405 MethodNotAllowed |
/// | provider token | as above |
/// | the key is registered for the bundle id | 400 FeatureNotEnabled |
/// | `apns-channel-id` present / base64 ≤ 64 characters | 400 MissingChannelId / BadChannelId |
/// | `apns-push-type` present / `liveactivity` | 400 MissingPushType / InvalidPushType |
/// | `apns-priority` 1, 5 or 10 when present | 400 BadPriority |
/// | `apns-expiration` present and whole epoch seconds | 400 BadExpirationDate |
/// | `apns-request-id` canonical UUID when present | 400 BadMessageId |
/// | body non-empty / ≤ 4096 bytes | 400 PayloadEmpty / 413 PayloadTooLarge |
/// | body an ActivityKit update or end (`{"aps": {timestamp, event, content-state, …}}`) | 400 BadPayload |
/// | the channel exists for this bundle id (not deleted) | 400 ChannelNotRegistered |
/// | storage policy 0 and `apns-expiration` ≠ 0 | 400 BadExpirationDate |
/// | injected fault (`provider: "broadcast"`, `token`: channel id) | its status and reason |
/// | otherwise | 200 with `apns-request-id` and `apns-unique-id` |
///
/// Every broadcast is recorded as a delivery with `provider` `broadcast` and `token` = the
/// channel id (control `GET /sandbox/broadcasts?channel_id=`).
extension Sandbox {
    /// Apple's per-app, per-environment channel limit ("Sending channel management requests to APNs").
    public static let maxChannelsPerBundle = 10_000

    func handleChannelManagement(_ request: HTTP2Request, bundle: String, all: Bool) -> HTTP2Response {
        state.withLock { $0.stats.channelRequests += 1 }
        let requestId = request.header("apns-request-id")?.lowercased() ?? UUID().uuidString.lowercased()
        func fail(_ status: Int, _ reason: String, _ detail: String? = nil) -> HTTP2Response {
            apnsError(status, reason, detail: detail, headers: [("apns-request-id", requestId)])
        }
        let allowed = all ? ["GET"] : ["POST", "GET", "DELETE"]
        guard allowed.contains(request.method) else { return fail(405, "MethodNotAllowed") }
        let jwt: VerifiedJWT
        switch authenticate(request) {
        case .failure(let status, let reason, let detail): return fail(status, reason, detail)
        case .verified(let v): jwt = v
        }
        if let problem = bundleProblem(bundle, jwt) { return fail(400, "FeatureNotEnabled", problem) }
        if all {
            if let f = takeFault(provider: "channels", token: nil), f.status != 0, !(200..<300).contains(f.status) {
                return fail(f.status, f.reason ?? Sandbox.defaultAPNsReason(f.status), "injected fault")
            }
            let ids = state.withLock { s in s.channels.values.filter { $0.bundleId == bundle }.sorted { $0.sequence < $1.sequence }.map(\.id) }
            return HTTP2Response(
                status: 200, headers: [("apns-request-id", requestId), ("content-type", "application/json")],
                body: JSONValue.object(["channels": .array(ids.map(JSONValue.string))]).serialized())
        }
        if request.method == "POST" {
            guard let o = (try? JSONValue.parse(request.body, maxDepth: 8))?.objectValue else {
                return fail(400, "BadPayload", "the body must be a JSON object")
            }
            guard let pushType = o["push-type"] else { return fail(400, "MissingPushType") }
            guard pushType.stringValue == "LiveActivity" else { return fail(400, "InvalidPushType", "push-type must be LiveActivity") }
            guard let p = o["message-storage-policy"]?.intValue, p == 0 || p == 1 else {
                return fail(400, "BadMessageStoragePolicy", "message-storage-policy must be 0 or 1")
            }
            let count = state.withLock { s in s.channels.values.reduce(0) { $0 + ($1.bundleId == bundle ? 1 : 0) } }
            if count >= Sandbox.maxChannelsPerBundle {
                return fail(400, "CannotCreateChannelConfig", "\(count) channels exist for \(bundle) (limit \(Sandbox.maxChannelsPerBundle))")
            }
            if let f = takeFault(provider: "channels", token: nil), f.status != 0, !(200..<300).contains(f.status) {
                return fail(f.status, f.reason ?? Sandbox.defaultAPNsReason(f.status), "injected fault")
            }
            let channel = makeChannel(bundleId: bundle, storagePolicy: Int(p))
            return HTTP2Response(status: 201, headers: [("apns-request-id", requestId), ("apns-channel-id", channel.id)])
        }
        guard let id = request.header("apns-channel-id"), !id.isEmpty else { return fail(400, "MissingChannelId") }
        guard Sandbox.isChannelIdWellFormed(id) else { return fail(400, "BadChannelId", "apns-channel-id must be base64 of at most 64 characters") }
        guard let channel = state.withLock({ $0.channels[id] }), channel.bundleId == bundle else { return fail(400, "ChannelNotRegistered") }
        if let f = takeFault(provider: "channels", token: id), f.status != 0, !(200..<300).contains(f.status) {
            return fail(f.status, f.reason ?? Sandbox.defaultAPNsReason(f.status), "injected fault")
        }
        if request.method == "DELETE" {
            state.withLock { _ = $0.channels.removeValue(forKey: id) }
            return HTTP2Response(status: 204, headers: [("apns-request-id", requestId)])
        }
        return HTTP2Response(
            status: 200, headers: [("apns-request-id", requestId), ("content-type", "application/json")],
            body: JSONValue.object([
                "message-storage-policy": .int(Int64(channel.storagePolicy)),
                "push-type": "LiveActivity"
            ]).serialized())
    }

    func handleBroadcast(_ request: HTTP2Request, bundle: String) -> HTTP2Response {
        state.withLock { $0.stats.broadcastRequests += 1 }
        var headers: [String: String] = [:]
        for name in ["apns-channel-id", "apns-push-type", "apns-priority", "apns-expiration", "apns-request-id", "apns-topic"] {
            if let v = request.header(name) { headers[name] = v }
        }
        let channelId = request.header("apns-channel-id") ?? ""
        let requestId = request.header("apns-request-id")?.lowercased() ?? UUID().uuidString.lowercased()
        var jwt: VerifiedJWT?
        let body = ParsedOnce(request.body)
        func answer(_ status: Int, _ reason: String?, _ detail: String? = nil, extra: [(String, String)] = []) -> HTTP2Response {
            record(
                provider: "broadcast", token: channelId, status: status, reason: reason,
                headers: headers.merging(["bundle_id": bundle]) { a, _ in a },
                jwt: jwt, payload: body.value, detail: detail)
            guard let reason else {
                return HTTP2Response(status: status, headers: [("apns-request-id", requestId), ("apns-unique-id", UUID().uuidString.lowercased())])
            }
            return apnsError(status, reason, detail: detail, headers: [("apns-request-id", requestId)] + extra)
        }
        guard request.method == "POST" else { return answer(405, "MethodNotAllowed") }
        switch authenticate(request) {
        case .failure(let status, let reason, let detail): return answer(status, reason, detail)
        case .verified(let v): jwt = v
        }
        if let jwt, let problem = bundleProblem(bundle, jwt) { return answer(400, "FeatureNotEnabled", problem) }
        guard !channelId.isEmpty else { return answer(400, "MissingChannelId") }
        guard Sandbox.isChannelIdWellFormed(channelId) else {
            return answer(400, "BadChannelId", "apns-channel-id must be base64 of at most 64 characters")
        }
        guard let pushType = request.header("apns-push-type") else { return answer(400, "MissingPushType") }
        guard pushType.lowercased() == "liveactivity" else { return answer(400, "InvalidPushType", "apns-push-type must be liveactivity") }
        if let p = request.header("apns-priority"), !["1", "5", "10"].contains(p) {
            return answer(400, "BadPriority", "apns-priority must be 1, 5 or 10")
        }
        guard let e = request.header("apns-expiration") else { return answer(400, "BadExpirationDate", "apns-expiration is required for broadcasts") }
        guard let expiration = Int64(e), expiration >= 0, expiration < 10_000_000_000 else {
            return answer(400, "BadExpirationDate", "apns-expiration must be whole epoch seconds")
        }
        if let id = request.header("apns-request-id"), UUID(uuidString: id) == nil {
            return answer(400, "BadMessageId", "apns-request-id must be a UUID")
        }
        guard !request.body.isEmpty else { return answer(400, "PayloadEmpty") }
        guard request.body.count <= Sandbox.maxPayloadBytes else {
            return answer(413, "PayloadTooLarge", "\(request.body.count) bytes > \(Sandbox.maxPayloadBytes)")
        }
        if let problem = Sandbox.liveActivityPayloadProblem(body.value) { return answer(400, "BadPayload", problem) }
        if let event = body.value?.objectValue?["aps"]?.objectValue?["event"]?.stringValue, event == "start" {
            return answer(400, "BadPayload", "a broadcast is an update or an end (a channel cannot start activities)")
        }
        guard let channel = state.withLock({ $0.channels[channelId] }), channel.bundleId == bundle else { return answer(400, "ChannelNotRegistered") }
        if channel.storagePolicy == 0 && expiration != 0 {
            return answer(400, "BadExpirationDate", "a channel with message-storage-policy 0 takes apns-expiration 0")
        }
        if let injected = injectedFault(provider: "broadcast", token: channelId, request, { answer($0, $1, $2, extra: $3) }) { return injected }
        return answer(200, nil)
    }

    /// Why the key of `jwt` may not manage channels of `bundle` (nil: it may).
    func bundleProblem(_ bundle: String, _ jwt: VerifiedJWT) -> String? {
        if bundle.isEmpty || bundle.contains("/") { return "the path must name a bundle id" }
        if let topics = state.withLock({ $0.apnsKeys[jwt.teamId + "." + jwt.keyId]?.topics }), !topics.contains(bundle) {
            return "this key is not registered for \(bundle)"
        }
        return nil
    }

    /// Why a start's `aps.input-push-channel` is wrong (nil when absent or right). `payload`:
    /// the request body as parsed (nil when it is not JSON).
    func inputPushChannelProblem(_ payload: JSONValue?, bundle: String) -> String? {
        guard let aps = payload?.objectValue?["aps"]?.objectValue,
            let value = aps["input-push-channel"]
        else { return nil }
        guard aps["event"]?.stringValue == "start" else { return "only a start carries input-push-channel" }
        if aps["input-push-token"] != nil { return "a start carries input-push-token or input-push-channel, not both" }
        guard let id = value.stringValue, let channel = state.withLock({ $0.channels[id] }), channel.bundleId == bundle else {
            return "input-push-channel must name a live channel of \(bundle)"
        }
        return nil
    }

    /// Base64 (standard alphabet, padded) of at most 64 characters.
    static func isChannelIdWellFormed(_ id: String) -> Bool {
        id.utf8.count <= 64 && id.utf8.count % 4 == 0 && Data(base64Encoded: id) != nil
    }

    /// Channels that exist now (not deleted), oldest first.
    public func channels(bundleId: String? = nil) -> [SandboxChannel] {
        state.withLock { s in s.channels.values.filter { bundleId == nil || $0.bundleId == bundleId }.sorted { $0.sequence < $1.sequence } }
    }

    /// Broadcast requests received (accepted or refused), oldest first; `channelId` filters.
    public func broadcasts(channelId: String? = nil) -> [SandboxDelivery] {
        deliveries(token: channelId, provider: "broadcast")
    }

    /// Creates a channel directly (tests, demos), as a `POST …/channels` would; returns it.
    @discardableResult
    public func createChannel(bundleId: String, storagePolicy: Int = 0) -> SandboxChannel {
        makeChannel(bundleId: bundleId, storagePolicy: storagePolicy)
    }

    private func makeChannel(bundleId: String, storagePolicy: Int) -> SandboxChannel {
        state.withLock { s in
            s.channelSequence += 1
            let channel = SandboxChannel(
                id: Data(SecureRandom.bytes(16)).base64EncodedString(), bundleId: bundleId, storagePolicy: storagePolicy,
                createdAt: configuration.now(), sequence: s.channelSequence)
            s.channels[channel.id] = channel
            return channel
        }
    }
}
