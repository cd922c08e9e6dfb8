import Foundation
import Crypto
import HTTP2
import HTTPServer
import JSON

/// The sandbox's JSON control endpoint (plain HTTP/1.1, default 127.0.0.1:8444):
///
/// | method & path | does |
/// | --- | --- |
/// | `GET /healthz` | `{"status": "ok"}` |
/// | `GET /sandbox/info` | URLs, demo team/key ids, project, client email, files |
/// | `GET /sandbox/deliveries?token=&provider=apns\|fcm&accepted=true` | `{"data": [delivery…], "run_id"}` oldest first; `run_id` changes when the sandbox restarts (sequences start over) |
/// | `DELETE /sandbox/deliveries` | forget deliveries |
/// | `GET /sandbox/broadcasts?channel_id=&accepted=true` | `{"data": [delivery…], "counts": {channel id: requests}, "run_id"}`: APNs broadcasts (deliveries with `provider` `broadcast`, `token` = channel id) |
/// | `GET /sandbox/channels?bundle_id=` | `{"data": [{channel_id, bundle_id, message_storage_policy, created_at}]}`: channels that exist now |
/// | `POST /sandbox/channels` | `{"bundle_id", "message_storage_policy"?: 0\|1}` → `201` channel (as APNs would create it) |
/// | `GET /sandbox/stats` | request counters, token requests, provider tokens seen |
/// | `GET /sandbox/faults` | faults and connection faults |
/// | `POST /sandbox/faults` | add a fault (`SandboxFault` JSON) → `{"id"}` |
/// | `DELETE /sandbox/faults` | remove every fault (and connection fault) |
/// | `PUT /sandbox/connection-faults` | `{"goaway_after_streams"?, "drop_connection_after_request"?, "refuse_streams_after"?, "response_delay_seconds"?}` |
/// | `POST /sandbox/dead-tokens` | `{"token"}`: APNs 410 Unregistered / FCM 404 UNREGISTERED from now on |
/// | `POST /sandbox/oauth/revoke` | every issued access token stops working (FCM 401) |
/// | `POST /sandbox/apns-keys` | `{"team_id", "key_id", "public_key" \| "private_key" (PEM), "topics"?}` trust another APNs key |
/// | `POST /sandbox/service-accounts` | `{"client_email", "project_id", "public_key" \| "private_key"}` trust another service account |
/// | `POST /sandbox/reset` | forget deliveries, stats, faults, dead tokens, access tokens |
enum SandboxControl {
    static func bad(_ m: String) -> HTTPError { HTTPError(status: 400, code: "INVALID_REQUEST", message: m) }

    static func body(_ req: HTTPRequest) throws -> [String: JSONValue] {
        guard let o = (try? req.jsonBody())?.objectValue else { throw bad("the body must be a JSON object") }
        return o
    }

    /// The public key a trust request names: `o["public_key"]` parsed by `fromPublic`, else the
    /// public half of `o["private_key"]` parsed by `fromPrivate` (both PEM).
    /// - Throws: `400 INVALID_REQUEST` "public_key or private_key must be <kind> PEM" when
    ///   neither field holds a key that parses.
    static func publicKey<Key>(
        _ o: [String: JSONValue], kind: String, fromPublic: (String) throws -> Key, fromPrivate: (String) throws -> Key
    ) throws -> Key {
        if let pem = o["public_key"]?.stringValue, let k = try? fromPublic(pem) { return k }
        if let pem = o["private_key"]?.stringValue, let k = try? fromPrivate(pem) { return k }
        throw bad("public_key or private_key must be \(kind) PEM")
    }

    static func router(_ sandbox: Sandbox) -> Router {
        let r = Router()
        r.add("GET", "/healthz") { _ in .json(200, ["status": "ok"]) }
        r.add("GET", "/sandbox/info") { _ in
            .json(
                200,
                .object([
                    "base_url": .string(sandbox.baseURL), "token_uri": .string(sandbox.tokenURI), "control_url": .string(sandbox.controlURL),
                    "team_id": .string(sandbox.teamId), "key_id": .string(sandbox.keyId), "project_id": .string(sandbox.projectId),
                    "client_email": .string(sandbox.clientEmail), "run_id": .string(sandbox.runId),
                    "files": .object(sandbox.files.mapValues(JSONValue.string)),
                    "env": .array(sandbox.environmentLines(caFile: sandbox.files["ca.pem"]).map(JSONValue.string))
                ]))
        }
        r.add("GET", "/sandbox/deliveries") { req in
            var list = sandbox.deliveries(token: req.query["token"], provider: req.query["provider"])
            if req.query["accepted"] == "true" { list = list.filter(\.accepted) }
            return .json(200, .object(["data": .array(list.map(\.json)), "run_id": .string(sandbox.runId)]))
        }
        r.add("DELETE", "/sandbox/deliveries") { _ in
            sandbox.state.withLock { $0.deliveries.removeAll() }
            return .json(200, ["status": "ok"])
        }
        r.add("GET", "/sandbox/broadcasts") { req in
            var list = sandbox.broadcasts(channelId: req.query["channel_id"])
            if req.query["accepted"] == "true" { list = list.filter(\.accepted) }
            var counts: [String: JSONValue] = [:]
            for b in list { counts[b.token] = .int((counts[b.token]?.intValue ?? 0) + 1) }
            return .json(200, .object(["data": .array(list.map(\.json)), "counts": .object(counts), "run_id": .string(sandbox.runId)]))
        }
        r.add("GET", "/sandbox/channels") { req in
            .json(200, .object(["data": .array(sandbox.channels(bundleId: req.query["bundle_id"]).map(\.json))]))
        }
        r.add("POST", "/sandbox/channels") { req in
            let o = try body(req)
            guard let bundle = o["bundle_id"]?.stringValue, !bundle.isEmpty else { throw bad("bundle_id is required") }
            let policy = o["message_storage_policy"]?.intValue ?? 0
            guard policy == 0 || policy == 1 else { throw bad("message_storage_policy must be 0 or 1") }
            return .json(201, sandbox.createChannel(bundleId: bundle, storagePolicy: Int(policy)).json)
        }
        r.add("GET", "/sandbox/stats") { _ in .json(200, sandbox.stats.json) }
        r.add("GET", "/sandbox/faults") { _ in .json(200, sandbox.faultsJSON) }
        r.add("POST", "/sandbox/faults") { req in
            let fault: SandboxFault
            do { fault = try SandboxFault(json: .object(try body(req))) } catch let e as SandboxError { throw bad(e.description) }
            return .json(201, .object(["id": .int(Int64(sandbox.addFault(fault)))]))
        }
        r.add("DELETE", "/sandbox/faults") { _ in
            sandbox.clearFaults()
            return .json(200, ["status": "ok"])
        }
        r.add("PUT", "/sandbox/connection-faults") { req in
            let o = try body(req)
            func int(_ k: String) throws -> Int? {
                guard let v = o[k], v != .null else { return nil }
                guard let i = v.intValue, i >= 0 else { throw bad("\(k) must be a non-negative integer") }
                return Int(i)
            }
            let delay = o["response_delay_seconds"]?.doubleValue ?? 0
            sandbox.setConnectionFaults(
                HTTP2ServerFaults(
                    goawayAfterStreams: try int("goaway_after_streams"),
                    dropConnectionAfterRequest: try int("drop_connection_after_request"),
                    refuseStreamsAfter: try int("refuse_streams_after"),
                    responseDelaySeconds: min(max(delay, 0), 120)))
            return .json(200, sandbox.faultsJSON)
        }
        r.add("POST", "/sandbox/dead-tokens") { req in
            guard let t = try body(req)["token"]?.stringValue, !t.isEmpty else { throw bad("token is required") }
            sandbox.markDead(t)
            return .json(200, ["status": "ok"])
        }
        r.add("POST", "/sandbox/oauth/revoke") { _ in
            sandbox.revokeAccessTokens()
            return .json(200, ["status": "ok"])
        }
        r.add("POST", "/sandbox/apns-keys") { req in
            let o = try body(req)
            guard let team = o["team_id"]?.stringValue, let kid = o["key_id"]?.stringValue else { throw bad("team_id and key_id are required") }
            let key = try publicKey(
                o, kind: "a P-256", fromPublic: { try P256PublicKey(pem: $0) }, fromPrivate: { try P256PrivateKey(pem: $0).publicKey })
            sandbox.registerAPNsKey(
                teamId: team, keyId: kid, publicKey: key,
                topics: o["topics"]?.arrayValue?.compactMap(\.stringValue))
            return .json(200, ["status": "ok", "fingerprint": .string(key.fingerprint)])
        }
        r.add("POST", "/sandbox/service-accounts") { req in
            let o = try body(req)
            guard let email = o["client_email"]?.stringValue, let project = o["project_id"]?.stringValue else {
                throw bad("client_email and project_id are required")
            }
            let key = try publicKey(
                o, kind: "an RSA", fromPublic: { try RSAPublicKey(pem: $0) }, fromPrivate: { try RSAPrivateKey(pem: $0).publicKey })
            sandbox.registerServiceAccount(clientEmail: email, projectId: project, publicKey: key)
            return .json(200, ["status": "ok", "fingerprint": .string(key.fingerprint)])
        }
        r.add("POST", "/sandbox/reset") { _ in
            sandbox.reset()
            return .json(200, ["status": "ok"])
        }
        return r
    }
}
