import Foundation
import Crypto
import HTTP2
import HTTPServer
import JSON

/// The Google side: the OAuth2 token endpoint (JWT-bearer grant, RFC 7523; Google "Using OAuth
/// 2.0 for Server to Server Applications") and FCM HTTP v1 `messages:send` (Google "FCM HTTP v1
/// API"; error bodies `{"error": {code, message, status, details: [{"@type": …FcmError,
/// errorCode}]}}`).
///
/// `POST /token` (form `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>`):
/// RS256 assertion from a registered `client_email` (`iss`), valid signature, `aud` = this
/// endpoint, `scope` containing `https://www.googleapis.com/auth/firebase.messaging`, `exp` in
/// the future and at most 3600 s after `iat` → `{access_token, expires_in: 3599, token_type:
/// "Bearer"}`; else `400 {"error": "invalid_grant" | "invalid_scope" | "unsupported_grant_type"
/// | "invalid_request", "error_description"}`.
///
/// `POST /v1/projects/<p>/messages:send`: `authorization: Bearer <access token issued here,
/// unexpired>` (else 401 UNAUTHENTICATED); `p` = the service account's project (else 403
/// PERMISSION_DENIED); body `{"message": {"token", "data"?: {string: string} ≤ 4096 bytes,
/// "android"?: {"priority": "HIGH"|"NORMAL", "ttl": "<n>s"}}}` (else 400 INVALID_ARGUMENT); dead
/// token → 404 UNREGISTERED; injected fault; else `200 {"name": "projects/<p>/messages/<id>"}`.
extension Sandbox {
    static let fcmScope = "https://www.googleapis.com/auth/firebase.messaging"
    static let maxDataBytes = 4096

    func oauthError(_ status: Int, _ error: String, _ description: String, retryAfter: Int? = nil) -> HTTP2Response {
        HTTP2Response(
            status: status, headers: [("content-type", "application/json")] + (retryAfter.map { [("retry-after", String($0))] } ?? []),
            body: JSONValue.object(["error": .string(error), "error_description": .string(description)]).serialized())
    }

    func handleToken(_ request: HTTP2Request) -> HTTP2Response {
        state.withLock { $0.stats.tokenRequests += 1 }
        guard request.method == "POST" else { return oauthError(405, "invalid_request", "use POST") }
        let form = Sandbox.parseForm(String(decoding: request.body, as: UTF8.self))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return oauthError(400, "unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let assertion = form["assertion"], let decoded = try? JWT.decode(assertion) else {
            return oauthError(400, "invalid_request", "assertion is missing or not a JWT")
        }
        guard let iss = decoded.claims["iss"]?.stringValue, let account = state.withLock({ $0.serviceAccounts[iss] }) else {
            return oauthError(400, "invalid_grant", "Invalid JWT: unknown issuer (client_email)")
        }
        guard JWT.verify(assertion, key: account.publicKey) != nil else { return oauthError(400, "invalid_grant", "Invalid JWT Signature.") }
        let aud = decoded.claims["aud"]?.stringValue ?? ""
        guard aud == tokenURI || (aud.hasSuffix(":\(port)/token") && aud.hasPrefix("https://")) else {
            return oauthError(400, "invalid_grant", "Invalid JWT: aud must be the token_uri \(tokenURI)")
        }
        let scopes = (decoded.claims["scope"]?.stringValue ?? "").split(separator: " ").map(String.init)
        guard scopes.contains(Sandbox.fcmScope) else { return oauthError(400, "invalid_scope", "scope must include \(Sandbox.fcmScope)") }
        guard let iat = decoded.claims["iat"]?.intValue, let exp = decoded.claims["exp"]?.intValue else {
            return oauthError(400, "invalid_grant", "Invalid JWT: iat and exp are required")
        }
        let now = Int64(configuration.now().timeIntervalSince1970.rounded(.down))
        guard exp > now, exp - iat <= 3600, iat <= now + 300 else {
            return oauthError(400, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
        }
        if let f = takeFault(provider: "oauth", token: nil), f.status != 0 {
            return oauthError(f.status, f.reason ?? "internal_failure", "injected fault", retryAfter: f.retryAfter)
        }
        let access = "ya29.sandbox-" + Digest.sha256Hex(SecureRandom.bytes(32)).prefix(48)
        let expiresIn: Int64 = 3599
        state.withLock { s in
            s.accessTokens[access] = AccessToken(
                clientEmail: iss, projectId: account.projectId,
                expiresAt: configuration.now().addingTimeInterval(Double(expiresIn)))
            s.stats.accessTokensIssued += 1
        }
        return HTTP2Response(
            status: 200, headers: [("content-type", "application/json")],
            body: JSONValue.object([
                "access_token": .string(access), "expires_in": .int(expiresIn),
                "token_type": "Bearer"
            ]).serialized())
    }

    static func googleStatus(_ code: Int) -> String {
        switch code {
        case 400: return "INVALID_ARGUMENT"
        case 401: return "UNAUTHENTICATED"
        case 403: return "PERMISSION_DENIED"
        case 404: return "NOT_FOUND"
        case 429: return "RESOURCE_EXHAUSTED"
        case 503: return "UNAVAILABLE"
        default: return "INTERNAL"
        }
    }

    static func defaultFCMErrorCode(_ code: Int) -> String? {
        switch code {
        case 400: return "INVALID_ARGUMENT"
        case 401: return nil
        case 403: return "SENDER_ID_MISMATCH"
        case 404: return "UNREGISTERED"
        case 429: return "QUOTA_EXCEEDED"
        case 503: return "UNAVAILABLE"
        default: return "INTERNAL"
        }
    }

    func fcmError(_ code: Int, errorCode: String?, message: String, retryAfter: Int? = nil) -> HTTP2Response {
        var error: [String: JSONValue] = ["code": .int(Int64(code)), "message": .string(message), "status": .string(Sandbox.googleStatus(code))]
        if let errorCode {
            error["details"] = .array([.object(["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(errorCode)])])
        }
        return HTTP2Response(
            status: code,
            headers: [("content-type", "application/json; charset=UTF-8")]
                + (retryAfter.map { [("retry-after", String($0))] } ?? []),
            body: JSONValue.object(["error": .object(error)]).serialized())
    }

    func handleFCM(_ request: HTTP2Request, project: String) -> HTTP2Response {
        state.withLock { $0.stats.fcmRequests += 1 }
        let parsed = try? JSONValue.parse(request.body, maxDepth: 64)
        let token = parsed?["message"]?["token"]?.stringValue ?? ""
        func answer(_ code: Int, _ errorCode: String?, _ message: String, retryAfter: Int? = nil) -> HTTP2Response {
            let reason = code < 300 ? nil : (errorCode ?? Sandbox.googleStatus(code))
            record(provider: "fcm", token: token, status: code, reason: reason, payload: parsed, detail: code < 300 ? nil : message)
            if code < 300 {
                let name = "projects/\(project)/messages/\(Digest.sha256Hex(SecureRandom.bytes(8)).prefix(16))"
                return HTTP2Response(
                    status: code, headers: [("content-type", "application/json; charset=UTF-8")],
                    body: JSONValue.object(["name": .string(name)]).serialized())
            }
            return fcmError(code, errorCode: errorCode, message: message, retryAfter: retryAfter)
        }
        guard request.method == "POST" else { return answer(405, nil, "use POST") }
        guard let auth = request.header("authorization"), let bearer = BearerToken.parse(auth) else {
            return answer(401, nil, "Request is missing required authentication credential. Expected OAuth 2 access token.")
        }
        let now = configuration.now()
        guard let access = state.withLock({ $0.accessTokens[bearer] }), now < access.expiresAt else {
            return answer(401, nil, "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        }
        guard access.projectId == project else {
            return answer(403, "SENDER_ID_MISMATCH", "Permission 'cloudmessaging.messages.create' denied on resource projects/\(project)")
        }
        guard let message = parsed?["message"]?.objectValue else { return answer(400, "INVALID_ARGUMENT", "the body must be {\"message\": {…}}") }
        guard !token.isEmpty else { return answer(400, "INVALID_ARGUMENT", "message.token is required (LiveRelay sends to one device)") }
        if let data = message["data"] {
            guard let d = data.objectValue else { return answer(400, "INVALID_ARGUMENT", "message.data must be a map") }
            if let (k, _) = d.first(where: { $0.value.stringValue == nil }) {
                return answer(400, "INVALID_ARGUMENT", "Invalid value at 'message.data[\(k)].value' (TYPE_STRING): every data value must be a string")
            }
            if data.serialized().count > Sandbox.maxDataBytes {
                return answer(400, "INVALID_ARGUMENT", "Message is too big: data is \(data.serialized().count) bytes > \(Sandbox.maxDataBytes)")
            }
        }
        if let android = message["android"] {
            guard let a = android.objectValue else { return answer(400, "INVALID_ARGUMENT", "message.android must be an object") }
            if let p = a["priority"], !["HIGH", "NORMAL"].contains(p.stringValue?.uppercased() ?? "") {
                return answer(400, "INVALID_ARGUMENT", "message.android.priority must be HIGH or NORMAL")
            }
            if let t = a["ttl"] {
                guard let s = t.stringValue, s.hasSuffix("s"), Double(s.dropLast()) != nil else {
                    return answer(400, "INVALID_ARGUMENT", "message.android.ttl must be a duration such as \"3600s\"")
                }
            }
        }
        if state.withLock({ $0.deadTokens.contains(token) }) { return answer(404, "UNREGISTERED", "Requested entity was not found.") }
        if let f = takeFault(provider: "fcm", token: token), f.status != 0 {
            if (200..<300).contains(f.status) { return answer(f.status, nil, "") }
            if f.status == 401 { return answer(401, f.reason, "injected fault: invalid authentication credentials") }
            return answer(f.status, f.reason ?? Sandbox.defaultFCMErrorCode(f.status), "injected fault", retryAfter: f.retryAfter)
        }
        return answer(200, nil, "")
    }

    /// `application/x-www-form-urlencoded` → map (later duplicates win).
    static func parseForm(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String { s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(s) }
            out[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return out
    }
}
