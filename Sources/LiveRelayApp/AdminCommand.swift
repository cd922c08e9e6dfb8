import Foundation
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres

/// `liverelay admin …`: operator tasks straight on the database (SPEC §9). Works on
/// `DATABASE_URL` or, without it, on the embedded cluster of the current directory (the one a
/// running `serve` started, or started for the command and stopped after it).
enum AdminCommand {
    static let usage = """
    usage: liverelay admin <task>

    tasks:
      tenants create --name NAME [--daily-push-quota Q]   prints {"tenant", "master_key": {id, credential}, "publishable_key"}
      operator-keys create [--label LABEL]                prints {"id", "credential"}

    Secrets are printed once and stored only as argon2id hashes.
    """

    static func run(_ args: [String], config: Configuration, log: Logger) throws {
        guard args.count >= 2 else { throw UsageError("missing task") }
        let task = args[0] + " " + args[1]
        let opts = try options(Array(args.dropFirst(2)))
        switch task {
        case "tenants create":
            guard let name = opts["name"], !name.isEmpty, name.count <= 200 else { throw UsageError("--name NAME (1–200 characters) is required") }
            var quota: Int64 = 10_000
            if let q = opts["daily-push-quota"] {
                guard let v = Int64(q), v >= 0, v <= 1_000_000_000 else { throw UsageError("--daily-push-quota must be an integer from 0 to 1000000000") }
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
        defer { pool.close() }
        try body(Database(pool: pool))
    }

    /// `--key value` and `--key=value` pairs.
    static func options(_ args: [String]) throws -> [String: String] {
        var out: [String: String] = [:]
        var i = 0
        while i < args.count {
            let a = args[i]
            guard a.hasPrefix("--") else { throw UsageError("unexpected argument \(a.debugDescription)") }
            if let eq = a.firstIndex(of: "=") {
                out[String(a[a.index(a.startIndex, offsetBy: 2)..<eq])] = String(a[a.index(after: eq)...])
            } else {
                guard i + 1 < args.count else { throw UsageError("\(a) needs a value") }
                out[String(a.dropFirst(2))] = args[i + 1]
                i += 1
            }
            i += 1
        }
        return out
    }

    static func check(_ opts: [String: String], allowed: Set<String>) throws {
        if let bad = opts.keys.first(where: { !allowed.contains($0) }) { throw UsageError("unknown option --\(bad)") }
    }
}
