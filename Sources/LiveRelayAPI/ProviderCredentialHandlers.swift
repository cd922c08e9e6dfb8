import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// docs/endpoints.md provider credentials (master key):
/// - `PUT /v1/provider-credentials/apns {team_id, key_id, private_key, topics, environment, idempotency_key?}`
/// - `PUT /v1/provider-credentials/fcm {service_account: {...} | "<the JSON file as text>", idempotency_key?}`
/// - `GET /v1/provider-credentials`
/// - `DELETE /v1/provider-credentials/apns[?environment=sandbox|production]` (no environment:
///   both) and `DELETE /v1/provider-credentials/fcm` → `200 {"deleted": [credential…]}` (the
///   removed credentials as `GET` lists them), `404 NOT_FOUND` when none was configured; each
///   deleted credential is one audit event (`provider_credential.apns.delete` / `.fcm.delete`).
///
/// Every PUT and DELETE NOTIFYs `liverelay_provider_credentials` with the tenant id in its
/// transaction, so every node's credential cache sees the change within a second
/// (docs/operations.md "Provider credentials").
///
/// Keys are validated (APNs: a P-256 `.p8`; FCM: an RSA ≥ 2048 service-account key), sealed with
/// AES-256-GCM under `LIVERELAY_KEK`, and never returned or logged: responses, audit events and
/// logs carry the public-key fingerprint (`sha256:<hex of SPKI DER>`) only. A PUT replaces the
/// previous credential (APNs: of that environment); it answers `201` when it created one and
/// `200` when it replaced one. An `idempotency_key` makes a retried PUT replay its first answer.
enum ProviderCredentialHandlers {
    /// `DELETE /v1/provider-credentials/apns[?environment=sandbox|production]`: removes the APNs
    /// key of that environment (both without `environment`). Pushes that need it then fail with
    /// `PROVIDER_CREDENTIALS_INVALID` until a new one is PUT.
    /// - Throws: `400 INVALID_REQUEST` (`details.field: "environment"`) for another value,
    ///   `404 NOT_FOUND` when nothing was configured.
    static func deleteAPNs(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let environment = req.query["environment"]
        if let e = environment, !["sandbox", "production"].contains(e) {
            throw DomainError.invalid("environment", "environment must be sandbox or production (or absent for both)")
        }
        let deleted = try ctx.db.tenant(tenant) { c -> [APNsCredentialRecord] in
            let rows = try ProviderCredentialStore.deleteAPNs(c, tenantId: tenant, environment: environment)
            for r in rows {
                try AuditStore.record(
                    c, tenantId: tenant, actorId: actor, action: "provider_credential.apns.delete",
                    objectType: "provider_credential", objectId: "apns_\(r.environment)", requestId: req.requestId,
                    details: [
                        "environment": .string(r.environment), "team_id": .string(r.teamId),
                        "key_id": .string(r.keyId), "fingerprint": .string(r.fingerprint)
                    ])
            }
            if !rows.isEmpty { try ProviderCredentialStore.notifyChanged(c, tenantId: tenant) }
            return rows
        }
        guard !deleted.isEmpty else {
            throw Endpoint.notFound(environment.map { "APNs credential for environment \($0)" } ?? "APNs credential")
        }
        ctx.log.info(
            "apns credential deleted",
            [
                "tenant_id": .string(tenant),
                "fingerprints": .array(deleted.map { .string($0.fingerprint) })
            ])
        return .json(200, .object(["deleted": .array(deleted.map(encodeAPNs))]))
    }

    /// `DELETE /v1/provider-credentials/fcm`: removes the FCM service account.
    /// - Throws: `404 NOT_FOUND` when none was configured.
    static func deleteFCM(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let deleted = try ctx.db.tenant(tenant) { c -> FCMCredentialRecord? in
            guard let r = try ProviderCredentialStore.deleteFCM(c, tenantId: tenant) else { return nil }
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "provider_credential.fcm.delete",
                objectType: "provider_credential", objectId: "fcm", requestId: req.requestId,
                details: [
                    "project_id": .string(r.projectId), "client_email": .string(r.clientEmail),
                    "fingerprint": .string(r.fingerprint)
                ])
            try ProviderCredentialStore.notifyChanged(c, tenantId: tenant)
            return r
        }
        guard let deleted else { throw Endpoint.notFound("FCM credential") }
        ctx.log.info("fcm credential deleted", ["tenant_id": .string(tenant), "fingerprint": .string(deleted.fingerprint)])
        return .json(200, .object(["deleted": .array([encodeFCM(deleted)])]))
    }

    /// Longest accepted private key PEM (characters); real keys are < 2 KiB (APNs) / < 4 KiB (RSA 4096).
    static let maxPEMLength = 16 * 1024

    static func putAPNs(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, body) = try Endpoint.reader(req)
        let teamId = try appleId(&r, "team_id")
        let keyId = try appleId(&r, "key_id")
        let pem = try r.string("private_key", maxLength: maxPEMLength)
        guard let topics = try r.optionalStringArray("topics", maxCount: 100, maxLength: 155) else {
            throw DomainError.invalid("topics", "topics is required: the bundle ids this key pushes to")
        }
        guard !topics.isEmpty else { throw DomainError.invalid("topics", "topics must name at least one bundle id") }
        for (i, t) in topics.enumerated() where !isBundleId(t) {
            throw DomainError.invalid(
                "topics.\(i)",
                "topics.\(i) must be a bundle id such as com.example.app (letters, digits, '.', '-'; without the .push-type.liveactivity suffix)")
        }
        let environment = try r.enumValue("environment", ["sandbox", "production"])
        let idem = try optionalIdempotencyKey(&r)
        try r.finish()
        let key: P256PrivateKey
        do { key = try P256PrivateKey(pem: pem) } catch {
            throw DomainError.invalid(
                "private_key", "private_key must be the APNs token-signing key: a PEM (.p8) P-256 private key (\(reason(error)))")
        }
        let fingerprint = key.publicKey.fingerprint
        let sealed = try ProviderCredentialStore.sealPrivateKey(
            key.pkcs8PEM, kek: ctx.kek, tenantId: tenant, provider: "apns",
            environment: environment)
        let audited: [String: JSONValue] = [
            "environment": .string(environment), "team_id": .string(teamId), "key_id": .string(keyId),
            "topics": J.strs(topics), "fingerprint": .string(fingerprint)
        ]
        return try store(
            ctx, req, tenant: tenant, actor: actor, provider: "apns", objectId: "apns_\(environment)", idempotencyKey: idem,
            body: body, audit: audited, log: ["environment": .string(environment), "fingerprint": .string(fingerprint)]
        ) { c in
            let (rec, created) = try ProviderCredentialStore.upsertAPNs(
                c, tenantId: tenant, environment: environment, teamId: teamId,
                keyId: keyId, topics: topics, privateKeySealed: sealed,
                fingerprint: fingerprint, actorId: actor)
            return (encodeAPNs(rec), created)
        }
    }

    static func putFCM(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, actor) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        var (r, body) = try Endpoint.reader(req)
        var sa = try serviceAccountReader(&r)
        let idem = try optionalIdempotencyKey(&r)
        try r.finish()
        let type = try sa.string("type", maxLength: 64)
        guard type == "service_account" else {
            throw DomainError.invalid("service_account.type", "service_account.type must be \"service_account\" (a Google service-account key file)")
        }
        let projectId = try sa.string("project_id", maxLength: 100)
        guard projectId.utf8.allSatisfy({ isAlnum($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }) else {
            throw DomainError.invalid("service_account.project_id", "service_account.project_id must be a Google Cloud project id")
        }
        let privateKeyId = try sa.string("private_key_id", maxLength: 128)
        let pem = try sa.string("private_key", maxLength: maxPEMLength)
        let clientEmail = try sa.string("client_email", maxLength: 254)
        guard clientEmail.contains("@"), !clientEmail.contains(where: { $0 == " " || $0 == "\n" }) else {
            throw DomainError.invalid("service_account.client_email", "service_account.client_email must be the service account's e-mail address")
        }
        let tokenURI = try sa.string("token_uri", maxLength: 2048)
        guard let u = URL(string: tokenURI), u.scheme?.lowercased() == "https" || u.scheme?.lowercased() == "http",
            let host = u.host, !host.isEmpty, TokenURIPolicy.allows(tokenURI, fcmURL: ctx.fcmURL)
        else {
            throw DomainError.invalid(
                "service_account.token_uri",
                "service_account.token_uri must be Google's token endpoint \(TokenURIPolicy.googleTokenURI) (or a URL on the configured FCM origin)")
        }
        // Other members of the Google key file (client_id, auth_uri, …) are accepted and not stored.
        let key: RSAPrivateKey
        do { key = try RSAPrivateKey(pem: pem) } catch {
            throw DomainError.invalid(
                "service_account.private_key", "service_account.private_key must be an RSA private key PEM of 2048 to 4096 bits (\(reason(error)))")
        }
        let fingerprint = key.publicKey.fingerprint
        let sealed = try ProviderCredentialStore.sealPrivateKey(key.pkcs8PEM, kek: ctx.kek, tenantId: tenant, provider: "fcm", environment: nil)
        let audited: [String: JSONValue] = [
            "project_id": .string(projectId), "client_email": .string(clientEmail),
            "private_key_id": .string(privateKeyId), "fingerprint": .string(fingerprint)
        ]
        return try store(
            ctx, req, tenant: tenant, actor: actor, provider: "fcm", objectId: "fcm", idempotencyKey: idem, body: body,
            audit: audited, log: ["project_id": .string(projectId), "fingerprint": .string(fingerprint)]
        ) { c in
            let (rec, created) = try ProviderCredentialStore.upsertFCM(
                c, tenantId: tenant, projectId: projectId, clientEmail: clientEmail, privateKeyId: privateKeyId,
                tokenURI: tokenURI, privateKeySealed: sealed, fingerprint: fingerprint, actorId: actor)
            return (encodeFCM(rec), created)
        }
    }

    /// `GET /v1/provider-credentials` → `{"data": [apns_production?, apns_sandbox?, fcm?], "next_cursor": null}`.
    static func list(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let (tenant, _) = try Endpoint.requireMaster(ctx.auth.authenticate(req))
        let (apns, fcm) = try ctx.db.tenant(tenant) { c in
            (try ProviderCredentialStore.apnsCredentials(c, tenantId: tenant), try ProviderCredentialStore.fcmCredential(c, tenantId: tenant))
        }
        var items = apns.map(encodeAPNs)
        if let fcm { items.append(encodeFCM(fcm)) }
        return .json(200, .object(["data": .array(items), "next_cursor": .null]))
    }

    // MARK: - helpers

    /// Runs a credential PUT of `provider` (`apns` or `fcm`) in the tenant's transaction, once
    /// per `idempotencyKey` when one was sent: `upsert` (the encoded credential and whether it
    /// was created), the audit event `provider_credential.<provider>.put` (`audit` plus
    /// `created`) and the change NOTIFY. Answers 201 when created, else 200, and logs
    /// `<provider> credential stored` with the tenant id and `log`.
    static func store(
        _ ctx: APIContext, _ req: HTTPRequest, tenant: String, actor: String, provider: String, objectId: String,
        idempotencyKey: String?, body: JSONValue, audit: [String: JSONValue], log: [String: JSONValue],
        upsert: (PostgresConnection) throws -> (credential: JSONValue, created: Bool)
    ) throws -> HTTPResponse {
        // The stored replay holds no secret (fingerprints only), so it is kept in clear.
        let response = try Endpoint.idempotentIfKeyed(ctx, req, tenantId: tenant, key: idempotencyKey, body: body, seal: false) { c in
            let (credential, created) = try upsert(c)
            try AuditStore.record(
                c, tenantId: tenant, actorId: actor, action: "provider_credential.\(provider).put", objectType: "provider_credential",
                objectId: objectId, requestId: req.requestId, details: audit.merging(["created": .bool(created)]) { _, new in new })
            try ProviderCredentialStore.notifyChanged(c, tenantId: tenant)
            return (created ? 201 : 200, credential)
        }
        ctx.log.info("\(provider) credential stored", log.merging(["tenant_id": .string(tenant)]) { _, new in new })
        return response
    }

    static func optionalIdempotencyKey(_ r: inout RequestReader) throws -> String? {
        guard r.object["idempotency_key"] != nil, r.object["idempotency_key"] != .null else {
            _ = r.raw("idempotency_key")
            return nil
        }
        return try r.idempotencyKey()
    }

    /// `service_account` as an object, or as the key file's text.
    static func serviceAccountReader(_ r: inout RequestReader) throws -> RequestReader {
        let v = try r.requiredRaw("service_account")
        if case .string(let text) = v {
            guard text.utf8.count <= 64 * 1024, let parsed = try? JSONValue.parse(Array(text.utf8), maxDepth: 8),
                parsed.objectValue != nil
            else {
                throw DomainError.invalid("service_account", "service_account must be the service-account JSON object (or its text)")
            }
            // The outer body was checked for U+0000 (HTTPRequest.jsonBody); this inner document was not.
            if parsed.jsonString.contains("\\u0000") {
                throw DomainError.invalid("service_account", "service_account may not contain U+0000 (NUL)")
            }
            return try RequestReader(parsed, path: "service_account")
        }
        return try RequestReader(v, path: "service_account")
    }

    /// Apple team and key ids: exactly 10 characters, uppercase letters and digits.
    static func appleId(_ r: inout RequestReader, _ key: String) throws -> String {
        let s = try r.string(key, maxLength: 64)
        guard s.utf8.count == 10, s.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }) else {
            throw DomainError.invalid(key, "\(key) must be the 10-character Apple identifier (uppercase letters and digits)")
        }
        return s
    }

    static func isAlnum(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) }

    static func isBundleId(_ s: String) -> Bool {
        guard !s.isEmpty, !s.hasPrefix("."), !s.hasSuffix("."), !s.contains(".."), !s.hasSuffix(".push-type.liveactivity") else { return false }
        return s.utf8.allSatisfy { isAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
    }

    /// A short reason from a key-parsing error; never contains key material.
    static func reason(_ error: Error) -> String {
        if let e = error as? CryptoError { return e.message }
        return "unreadable key"
    }

    static func health(_ success: Date?, _ failure: Date?, _ reason: String?) -> [String: JSONValue] {
        ["last_success_at": J.ts(success), "last_failure_at": J.ts(failure), "last_failure_reason": J.str(reason)]
    }

    static func encodeAPNs(_ r: APNsCredentialRecord) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string("apns_\(r.environment)"), "provider": "apns", "environment": .string(r.environment),
            "team_id": .string(r.teamId), "key_id": .string(r.keyId), "topics": J.strs(r.topics),
            "fingerprint": .string(r.fingerprint), "created_at": J.ts(r.createdAt), "updated_at": J.ts(r.updatedAt)
        ]
        o.merge(health(r.lastSuccessAt, r.lastFailureAt, r.lastFailureReason)) { a, _ in a }
        return .object(o)
    }

    static func encodeFCM(_ r: FCMCredentialRecord) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": "fcm", "provider": "fcm", "project_id": .string(r.projectId), "client_email": .string(r.clientEmail),
            "private_key_id": .string(r.privateKeyId), "token_uri": .string(r.tokenURI), "fingerprint": .string(r.fingerprint),
            "created_at": J.ts(r.createdAt), "updated_at": J.ts(r.updatedAt)
        ]
        o.merge(health(r.lastSuccessAt, r.lastFailureAt, r.lastFailureReason)) { a, _ in a }
        return .object(o)
    }
}
