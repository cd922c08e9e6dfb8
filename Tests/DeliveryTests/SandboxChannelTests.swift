import Foundation
import Crypto
import HTTP2
import JSON
import LiveRelayCore
import LiveRelaySandbox
import XCTest

/// The sandbox's APNs channel management and broadcast checks against raw HTTP/2 requests
/// (Apple "Sending channel management requests to APNs", "Sending broadcast push notification
/// requests to APNs"), and its control endpoint for broadcasts and channels.
final class SandboxChannelTests: XCTestCase {
    var h: ProviderHarness!
    var conn: HTTP2Connection!
    var jwt = ""
    override func setUpWithError() throws {
        h = try ProviderHarness()
        conn = try HTTP2Connection(
            configuration: HTTP2ClientConfiguration(
                baseURL: URL(string: h.sandbox.baseURL)!, extraCAFile: h.sandbox.files["ca.pem"], connectTimeoutSeconds: 5, requestTimeoutSeconds: 5))
        jwt = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)],
            claims: ["iss": .string(h.sandbox.teamId), "iat": .int(Int64(h.clock.now().timeIntervalSince1970))],
            algorithm: .es256(h.sandbox.apnsKey))
    }
    override func tearDown() { conn?.close(); h?.tearDown() }

    func send(_ method: String, _ path: String, _ headers: [(String, String)] = [], body: [UInt8] = [], auth: Bool = true) throws -> HTTP2Response {
        try conn.send(HTTP2Request(method: method, path: path, headers: (auth ? [("authorization", "bearer \(jwt)")] : []) + headers, body: body))
    }

    func reason(_ r: HTTP2Response) -> String? { ProviderOutcome.apnsReason(r.body) }

    func createBody(_ o: [String: JSONValue]) -> [UInt8] { JSONValue.object(o).serialized() }

    func testChannelManagementChecks() throws {
        let path = "/1/apps/com.example.app/channels"
        let requestId = UUID().uuidString.lowercased()
        let created = try send(
            "POST", path, [("apns-request-id", requestId)], body: createBody(["message-storage-policy": 1, "push-type": "LiveActivity"]))
        XCTAssertEqual(created.status, 201)
        XCTAssertEqual(created.header("apns-request-id"), requestId)
        let id = try XCTUnwrap(created.header("apns-channel-id"))

        XCTAssertEqual(try send("PUT", path).status, 405)
        XCTAssertEqual(reason(try send("PUT", path)), "MethodNotAllowed")
        XCTAssertEqual(
            reason(try send("POST", path, body: createBody(["message-storage-policy": 0, "push-type": "LiveActivity"]), auth: false)),
            "MissingProviderToken")
        XCTAssertEqual(reason(try send("POST", path, body: createBody(["message-storage-policy": 0]))), "MissingPushType")
        XCTAssertEqual(
            reason(try send("POST", path, body: createBody(["message-storage-policy": 0, "push-type": "liveactivity"]))), "InvalidPushType")
        XCTAssertEqual(reason(try send("POST", path, body: createBody(["push-type": "LiveActivity"]))), "BadMessageStoragePolicy")
        XCTAssertEqual(
            reason(try send("POST", path, body: createBody(["message-storage-policy": 2, "push-type": "LiveActivity"]))),
            "BadMessageStoragePolicy")
        XCTAssertEqual(reason(try send("POST", path, body: Array("nope".utf8))), "BadPayload")

        let read = try send("GET", path, [("apns-channel-id", id)])
        XCTAssertEqual(read.status, 200)
        XCTAssertEqual(try JSONValue.parse(read.body)["message-storage-policy"]?.intValue, 1)
        XCTAssertEqual(try JSONValue.parse(read.body)["push-type"]?.stringValue, "LiveActivity")
        XCTAssertEqual(reason(try send("GET", path)), "MissingChannelId")
        XCTAssertEqual(reason(try send("GET", path, [("apns-channel-id", "%%%")])), "BadChannelId")
        XCTAssertEqual(reason(try send("GET", path, [("apns-channel-id", String(repeating: "A", count: 68))])), "BadChannelId", "over 64 characters")
        XCTAssertEqual(try send("GET", path, [("apns-channel-id", String(repeating: "A", count: 64))]).status, 400)
        XCTAssertEqual(
            reason(try send("GET", path, [("apns-channel-id", String(repeating: "A", count: 64))])), "ChannelNotRegistered",
            "64 characters are well formed")
        XCTAssertEqual(
            reason(try send("GET", "/1/apps/com.example.b/channels", [("apns-channel-id", id)])), "ChannelNotRegistered",
            "a channel belongs to its bundle id")

        let all = try send("GET", "/1/apps/com.example.app/all-channels")
        XCTAssertEqual(all.status, 200)
        XCTAssertEqual(try JSONValue.parse(all.body)["channels"], .array([.string(id)]))
        XCTAssertEqual(reason(try send("POST", "/1/apps/com.example.app/all-channels")), "MethodNotAllowed")

        XCTAssertEqual(try send("DELETE", path, [("apns-channel-id", id)]).status, 204)
        XCTAssertEqual(reason(try send("DELETE", path, [("apns-channel-id", id)])), "ChannelNotRegistered")
        XCTAssertEqual(try JSONValue.parse(try send("GET", "/1/apps/com.example.app/all-channels").body)["channels"], .array([]))

        // A key registered for other bundle ids only.
        let narrow = P256PrivateKey.generate()
        h.sandbox.registerAPNsKey(teamId: "TEAMNARROW", keyId: "KEYNARROW1", publicKey: narrow.publicKey, topics: ["com.example.b"])
        let narrowJWT = try JWT.sign(
            header: ["kid": "KEYNARROW1"], claims: ["iss": "TEAMNARROW", "iat": .int(Int64(h.clock.now().timeIntervalSince1970))],
            algorithm: .es256(narrow))
        let r = try conn.send(
            HTTP2Request(
                method: "POST", path: path, headers: [("authorization", "bearer \(narrowJWT)")],
                body: createBody(["message-storage-policy": 0, "push-type": "LiveActivity"])))
        XCTAssertEqual(reason(r), "FeatureNotEnabled")
        XCTAssertGreaterThan(h.sandbox.stats.channelRequests, 10)
    }

    func testBroadcastChecksAndDeleteEndsBroadcasts() throws {
        let none = h.sandbox.createChannel(bundleId: "com.example.app", storagePolicy: 0)
        let stored = h.sandbox.createChannel(bundleId: "com.example.app", storagePolicy: 1)
        let path = "/4/broadcasts/apps/com.example.app"
        let good = APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["score": "1-0"]).bytes()
        func headers(_ ch: String, drop: String? = nil, set: (String, String)? = nil) -> [(String, String)] {
            var list: [(String, String)] = [
                ("apns-channel-id", ch), ("apns-push-type", "liveactivity"), ("apns-priority", "10"),
                ("apns-expiration", "0"), ("apns-request-id", UUID().uuidString.lowercased())
            ]
            list.removeAll { $0.0 == drop || $0.0 == set?.0 }
            if let set { list.append(set) }
            return list
        }
        let ok = try send("POST", path, headers(none.id), body: good)
        XCTAssertEqual(ok.status, 200)
        XCTAssertNotNil(ok.header("apns-unique-id"))
        XCTAssertNotNil(ok.header("apns-request-id"))
        XCTAssertEqual(reason(try send("GET", path, headers(none.id))), "MethodNotAllowed")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id), body: good, auth: false)), "MissingProviderToken")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, drop: "apns-channel-id"), body: good)), "MissingChannelId")
        XCTAssertEqual(reason(try send("POST", path, headers("***"), body: good)), "BadChannelId")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, drop: "apns-push-type"), body: good)), "MissingPushType")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, set: ("apns-push-type", "alert")), body: good)), "InvalidPushType")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, set: ("apns-priority", "3")), body: good)), "BadPriority")
        XCTAssertEqual(try send("POST", path, headers(none.id, set: ("apns-priority", "1")), body: good).status, 200)
        XCTAssertEqual(
            reason(try send("POST", path, headers(none.id, drop: "apns-expiration"), body: good)), "BadExpirationDate",
            "apns-expiration is required")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, set: ("apns-expiration", "soon")), body: good)), "BadExpirationDate")
        XCTAssertEqual(
            reason(try send("POST", path, headers(none.id, set: ("apns-expiration", "1")), body: good)), "BadExpirationDate",
            "storage policy none takes 0 only")
        XCTAssertEqual(try send("POST", path, headers(stored.id, set: ("apns-expiration", "1")), body: good).status, 200)
        XCTAssertEqual(reason(try send("POST", path, headers(none.id, set: ("apns-request-id", "x")), body: good)), "BadMessageId")
        XCTAssertEqual(reason(try send("POST", path, headers(none.id), body: [])), "PayloadEmpty")
        XCTAssertEqual(try send("POST", path, headers(none.id), body: Array(repeating: 0x20, count: 4097)).status, 413)
        XCTAssertEqual(reason(try send("POST", path, headers(none.id), body: Array(#"{"aps":{}}"#.utf8))), "BadPayload")
        XCTAssertEqual(reason(try send("POST", "/4/broadcasts/apps/com.example.b", headers(none.id), body: good)), "ChannelNotRegistered")

        // Deleting the channel makes later broadcasts fail ChannelNotRegistered.
        XCTAssertEqual(try send("DELETE", "/1/apps/com.example.app/channels", [("apns-channel-id", none.id)]).status, 204)
        XCTAssertEqual(reason(try send("POST", path, headers(none.id), body: good)), "ChannelNotRegistered")

        // Every broadcast request is recorded per channel.
        let recorded = h.sandbox.broadcasts(channelId: none.id)
        XCTAssertEqual(recorded.filter(\.accepted).count, 2)
        XCTAssertEqual(recorded.last?.reason, "ChannelNotRegistered")
        XCTAssertEqual(h.sandbox.broadcasts(channelId: stored.id).count, 1)
        XCTAssertEqual(h.sandbox.stats.broadcastRequests, h.sandbox.broadcasts().count)
    }

    func testInputPushChannelInStartPushes() throws {
        let channel = h.sandbox.createChannel(bundleId: "com.example.app")
        func start(_ extra: [String: JSONValue]) throws -> HTTP2Response {
            var aps: [String: JSONValue] = [
                "timestamp": .int(Int64(h.clock.now().timeIntervalSince1970)), "event": "start", "content-state": [:],
                "attributes-type": "A", "attributes": ["target_id": "tgt_x"], "alert": ["title": "t", "body": "b"]
            ]
            for (k, v) in extra { aps[k] = v }
            return try send(
                "POST", "/3/device/\(ProviderHarness.hexToken())",
                [("apns-topic", "com.example.app.push-type.liveactivity"), ("apns-push-type", "liveactivity")],
                body: JSONValue.object(["aps": .object(aps)]).serialized())
        }
        XCTAssertEqual(try start(["input-push-channel": .string(channel.id)]).status, 200)
        XCTAssertEqual(try start(["input-push-token": 1]).status, 200)
        XCTAssertEqual(reason(try start(["input-push-channel": "AAAAAAAAAAAAAAAAAAAAAA=="])), "BadPayload", "unknown channel")
        XCTAssertEqual(reason(try start(["input-push-channel": .string(channel.id), "input-push-token": 1])), "BadPayload")
    }

    func testControlEndpointListsBroadcastsAndChannels() throws {
        func call(_ method: String, _ path: String, _ body: String? = nil) throws -> (Int, JSONValue) {
            h.control(method, path, try body.map { try JSONValue.parse($0) })
        }
        let (status, created) = try call("POST", "/sandbox/channels", #"{"bundle_id": "com.example.app", "message_storage_policy": 1}"#)
        XCTAssertEqual(status, 201)
        let id = try XCTUnwrap(created["channel_id"]?.stringValue)
        XCTAssertEqual(try call("POST", "/sandbox/channels", #"{"bundle_id": "com.example.app", "message_storage_policy": 3}"#).0, 400)
        XCTAssertEqual(try call("GET", "/sandbox/channels?bundle_id=com.example.app").1["data"]?.arrayValue?.count, 1)
        let body = APNsPayload(event: .update, timestamp: h.clock.now(), contentState: ["s": 1]).bytes()
        for _ in 0..<3 {
            XCTAssertEqual(
                try send(
                    "POST", "/4/broadcasts/apps/com.example.app",
                    [("apns-channel-id", id), ("apns-push-type", "liveactivity"), ("apns-expiration", "0")], body: body
                ).status, 200)
        }
        let (_, list) = try call("GET", "/sandbox/broadcasts?channel_id=\(id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")
        XCTAssertEqual(list["data"]?.arrayValue?.count, 3)
        XCTAssertEqual(list["counts"]?[id]?.intValue, 3)
        XCTAssertEqual(list["data"]?.arrayValue?.first?["provider"]?.stringValue, "broadcast")
        XCTAssertEqual(try call("POST", "/sandbox/faults", #"{"provider": "broadcast", "status": 500, "times": 1}"#).0, 201)
        XCTAssertEqual(
            try send(
                "POST", "/4/broadcasts/apps/com.example.app",
                [("apns-channel-id", id), ("apns-push-type", "liveactivity"), ("apns-expiration", "0")], body: body
            ).status, 500)
        XCTAssertEqual(try call("GET", "/sandbox/broadcasts?accepted=true").1["data"]?.arrayValue?.count, 3)
        XCTAssertEqual(try call("GET", "/sandbox/stats").1["broadcast_requests"]?.intValue, 4)
    }
}
