import Foundation
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres

/// `liverelay admin …`: operator tasks straight on the database (docs/configuration.md). Works on
/// `DATABASE_URL` or, without it, on the embedded cluster of the current directory (the one a
/// running `serve` started, or started for the command and stopped after it).
enum AdminCommand {
    static let usage = """
        usage: liverelay admin <task>

        tasks:
          tenants create --name NAME [--daily-push-quota Q]   prints {"tenant", "master_key": {id, credential}, "publishable_key"}
          operator-keys create [--label LABEL]                prints {"id", "credential"}
          tenants list [--limit N] [--cursor C]               prints {"data": [tenant…], "next_cursor"} (every tenant without --limit)
          tenants suspend --tenant T                          status suspended: every credential of T gets 403 TENANT_SUSPENDED
          tenants resume --tenant T                           status active again
          tenants set-quota --tenant T --daily-push-quota Q   prints the tenant
          master-keys rotate --tenant T [--grace SECONDS] [--label LABEL]
                                                              creates a master key (printed once) and schedules the revocation of
                                                              every other active master key of T after SECONDS (default 3600,
                                                              0 = now, at most 2592000); prints {"master_key", "revoked": [...]}
          usage --tenant T                                    today's (UTC) push quota: {"tenant_id", "day", "limit", "used",
                                                              "reserved", "remaining", "resets_at"}

        Secrets are printed once and stored only as argon2id hashes. Every change is recorded as an
        audit event with actor "cli".
        """

    static func run(_ args: [String], config: Configuration, log: Logger) throws {
        if args.first == "usage" {
            let opts = try options(Array(args.dropFirst()))
            try check(opts, allowed: ["tenant"])
            let tenant = try required(opts, "tenant")
            try withDatabase(config, log) { db in print(try AdminTasks.usage(db, tenant: tenant).jsonString) }
            return
        }
        guard args.count >= 2 else { throw UsageError("missing task") }
        let task = args[0] + " " + args[1]
        let opts = try options(Array(args.dropFirst(2)))
        switch task {
        case "tenants list":
            try check(opts, allowed: ["limit", "cursor"])
            var limit: Int?
            if let l = opts["limit"] {
                guard let v = Int(l), (1...200).contains(v) else { throw UsageError("--limit must be an integer from 1 to 200") }
                limit = v
            }
            try withDatabase(config, log) { db in
                print(try AdminTasks.listTenants(db, limit: limit, cursor: opts["cursor"]).jsonString)
            }
        case "tenants suspend", "tenants resume":
            try check(opts, allowed: ["tenant"])
            let tenant = try required(opts, "tenant")
            try withDatabase(config, log) { db in
                print(try AdminTasks.updateTenant(db, id: tenant, quota: nil, status: args[1] == "suspend" ? "suspended" : "active").jsonString)
            }
        case "tenants set-quota":
            try check(opts, allowed: ["tenant", "daily-push-quota"])
            let tenant = try required(opts, "tenant")
            guard let q = opts["daily-push-quota"], let quota = Int64(q), quota >= 0, quota <= 1_000_000_000 else {
                throw UsageError("--daily-push-quota Q (an integer from 0 to 1000000000) is required")
            }
            try withDatabase(config, log) { db in
                print(try AdminTasks.updateTenant(db, id: tenant, quota: quota, status: nil).jsonString)
            }
        case "master-keys rotate":
            try check(opts, allowed: ["tenant", "grace", "label"])
            let tenant = try required(opts, "tenant")
            var grace: Int64 = 3600
            if let g = opts["grace"] {
                guard let v = Int64(g), v >= 0, v <= 30 * 86400 else { throw UsageError("--grace must be a number of seconds from 0 to 2592000") }
                grace = v
            }
            let label = opts["label"] ?? "rotated by liverelay admin"
            guard label.count <= 200 else { throw UsageError("--label is at most 200 characters") }
            try withDatabase(config, log) { db in
                print(try AdminTasks.rotateMasterKeys(db, tenant: tenant, graceSeconds: grace, label: label).jsonString)
            }
        case "tenants create":
            guard let name = opts["name"], !name.isEmpty, name.count <= 200 else { throw UsageError("--name NAME (1–200 characters) is required") }
            var quota: Int64 = 10_000
            if let q = opts["daily-push-quota"] {
                guard let v = Int64(q), v >= 0, v <= 1_000_000_000 else {
                    throw UsageError("--daily-push-quota must be an integer from 0 to 1000000000")
                }
                quota = v
            }
            try check(opts, allowed: ["name", "daily-push-quota"])
            try withDatabase(config, log) { db in
                let created = try TenantProvisioning.create(db, name: name, dailyPushQuota: quota, actorId: "cli", requestId: "cli")
                print(created.json(now: Date()).jsonString)
            }
        case "operator-keys create":
            try check(opts, allowed: ["label"])
            try withDatabase(config, log) { db in
                let minted = try CredentialMint.make(.operator)
                try db.system { c in try KeyStore.insertOperatorKey(c, id: minted.id, label: opts["label"] ?? "", secretHash: minted.secretHash) }
                print(JSONValue.object(["id": .string(minted.id), "credential": .string(minted.token)]).jsonString)
            }
        default:
            throw UsageError("unknown task \(task.debugDescription)")
        }
    }

    static func withDatabase(_ config: Configuration, _ log: Logger, _ body: (Database) throws -> Void) throws {
        let rt = try Runtime(config: config, log: log)
        defer { rt.shutdown() }
        let pool = try rt.openDatabase(poolSize: 2)
        let db = config.database(pool)
        defer {
            db.flushNotifications()  // post-commit hints (e.g. a revocation) leave before the process does
            pool.close()
        }
        try body(db)
    }

    /// `--key value` and `--key=value` pairs.
    static func options(_ args: [String]) throws -> [String: String] { try UsageError.options(args, flags: []) }

    static func required(_ opts: [String: String], _ name: String) throws -> String {
        guard let v = opts[name], !v.isEmpty else { throw UsageError("--\(name) is required") }
        return v
    }

    static func check(_ opts: [String: String], allowed: Set<String>) throws {
        if let bad = opts.keys.first(where: { !allowed.contains($0) }) { throw UsageError("unknown option --\(bad)") }
    }
}

/// A failed admin task (exit status 1), e.g. an unknown tenant.
struct AdminError: Error, CustomStringConvertible {
    let description: String
}

/// The database work of the `admin` tasks beyond tenant and operator-key creation. Objects are
/// printed with the API's shapes (docs/endpoints.md: tenant, master key; usage as `GET /v1/remote-updates/usage`).
enum AdminTasks {
    static func ts(_ d: Date?) -> JSONValue { d.map { .string(Timestamp.format($0)) } ?? .null }

    static func tenantJSON(_ t: TenantRecord) -> JSONValue {
        .object([
            "id": .string(t.id), "name": .string(t.name), "daily_push_quota": .int(t.dailyPushQuota),
            "status": .string(t.status), "created_at": ts(t.createdAt), "updated_at": ts(t.updatedAt)
        ])
    }

    static func masterKeyJSON(_ k: MasterKeyRecord, now: Date, credential: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(k.id), "object": "master_key", "label": .string(k.label),
            "status": .string(k.status(now: now)), "created_by": k.createdBy.map(JSONValue.string) ?? .null,
            "created_at": ts(k.createdAt), "revoked_at": ts(k.revokedAt), "expires_at": ts(k.expiresAt)
        ]
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    static func requireTenant(_ c: PostgresConnection, _ id: String) throws -> TenantRecord {
        guard let t = try TenantStore.get(c, id: id) else { throw AdminError(description: "no tenant \(id)") }
        return t
    }

    /// Every tenant (oldest first), or one page with `limit`.
    static func listTenants(_ db: Database, limit: Int?, cursor: String?) throws -> JSONValue {
        var after: String?
        if let cursor, !cursor.isEmpty {
            guard let id = Cursor.decode(cursor) else { throw UsageError("--cursor is not one this command printed") }
            after = id
        }
        return try db.system { c in
            if let limit {
                let page = try TenantStore.list(c, limit: limit, after: after)
                return .object(["data": .array(page.items.map(tenantJSON)), "next_cursor": page.nextCursor.map(JSONValue.string) ?? .null])
            }
            var all: [JSONValue] = []
            var next = after
            repeat {
                let page = try TenantStore.list(c, limit: 200, after: next)
                all += page.items.map(tenantJSON)
                next = page.nextCursor.flatMap(Cursor.decode)
            } while next != nil
            return .object(["data": .array(all), "next_cursor": .null])
        }
    }

    /// Changes quota and/or status like `PATCH /v1/operator/tenants/{id}` (audit event, cache
    /// invalidation on every node on a status change).
    static func updateTenant(_ db: Database, id: String, quota: Int64?, status: String?) throws -> JSONValue {
        try db.system { c in
            let before = try requireTenant(c, id)
            guard let t = try TenantStore.update(c, id: id, name: nil, dailyPushQuota: quota, status: status) else {
                throw AdminError(description: "no tenant \(id)")
            }
            var changes: [String: JSONValue] = [:]
            if let quota { changes["daily_push_quota"] = .int(quota) }
            if let status { changes["status"] = .string(status) }
            try AuditStore.record(
                c, tenantId: id, actorId: "cli", action: "tenant.update", objectType: "tenant", objectId: id,
                requestId: "cli", details: changes)
            if before.status != t.status { try CredentialLookup.announceInvalidation(c, subject: "tenant:\(id)") }
            return tenantJSON(t)
        }
    }

    /// Rotation in one transaction: a new master key, then every other master key of the tenant
    /// that is active (not revoked, not expired) is revoked with `expires_at = now + grace`.
    /// Keys already revoking keep their earlier expiry.
    static func rotateMasterKeys(_ db: Database, tenant: String, graceSeconds: Int64, label: String) throws -> JSONValue {
        _ = try db.system { c in try requireTenant(c, tenant) }
        let minted = try CredentialMint.make(.master)
        let now = Date()
        return try db.tenant(tenant) { c in
            let old = try KeyStore.lockUnrevokedMasterKeyIds(c, tenantId: tenant)
            let k = try KeyStore.insertMasterKey(c, tenantId: tenant, id: minted.id, label: label, secretHash: minted.secretHash, createdBy: "cli")
            try AuditStore.record(
                c, tenantId: tenant, actorId: "cli", action: "master_key.create", objectType: "master_key",
                objectId: k.id, requestId: "cli", details: ["label": .string(label), "rotation": true])
            var revoked: [JSONValue] = []
            let expires = now.addingTimeInterval(Double(graceSeconds))
            for id in old {
                guard let r = try KeyStore.revokeMasterKey(c, tenantId: tenant, id: id, expiresAt: expires) else { continue }
                try AuditStore.record(
                    c, tenantId: tenant, actorId: "cli", action: "master_key.revoke", objectType: "master_key",
                    objectId: id, requestId: "cli", details: ["expires_in_seconds": .int(graceSeconds), "rotation": true])
                try CredentialLookup.announceInvalidation(c, subject: id)
                revoked.append(masterKeyJSON(r, now: now))
            }
            return .object(["master_key": masterKeyJSON(k, now: now, credential: minted.token), "revoked": .array(revoked)])
        }
    }

    /// Today's (UTC) quota of `tenant`, as `GET /v1/remote-updates/usage` shows it.
    static func usage(_ db: Database, tenant: String) throws -> JSONValue {
        let now = Date()
        let day = QuotaStore.day(now)
        let t = try db.system { c in try requireTenant(c, tenant) }
        let u = try db.tenant(tenant) { c in try QuotaStore.usage(c, tenantId: tenant, day: day) }
        return .object([
            "tenant_id": .string(tenant), "day": .string(day), "limit": .int(t.dailyPushQuota), "used": .int(u.used),
            "reserved": .int(u.reserved), "remaining": .int(max(0, t.dailyPushQuota - u.used - u.reserved)),
            "resets_at": .string(Timestamp.format(WriteRules.quotaResetsAt(now)))
        ])
    }
}
