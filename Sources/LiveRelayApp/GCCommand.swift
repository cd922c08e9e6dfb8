import Foundation
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging

/// `liverelay gc [--dry-run]` (docs/templates.md, docs/configuration.md): one GC pass straight on the database (DATABASE_URL
/// or the embedded cluster). Prints one JSON line per template version removed (or, with
/// `--dry-run`, that would be removed), then one summary line
/// `{"summary": {"dry_run", "versions", "bytes", "targets", "operations", "idempotency_records",
/// "retention_days"}}` (the last four from the retention purge, docs/security.md "Retention").
enum GCCommand {
    static let usage = """
        usage: liverelay gc [--dry-run]

        Deletes every collectable template version: not referenced by a live target, a start target's
        current version or an unrevoked sender key naming its start target, for 7 days since its last
        reference ended. Then purges targets that ended more than LIVERELAY_RETENTION_DAYS (default 30)
        days ago with their operations, and expired idempotency records. Prints one JSON line per
        version, then a summary line. --dry-run deletes nothing.
        """

    static func run(_ args: [String], config: Configuration, log: Logger) throws {
        var dryRun = false
        for a in args {
            switch a {
            case "--dry-run": dryRun = true
            default: throw UsageError("unknown option \(a.debugDescription)")
            }
        }
        try AdminCommand.withDatabase(config, log) { db in
            let removed = try RetentionStore.collect(db, now: Date(), dryRun: dryRun) { binding, error in
                FileHandle.standardError.write(Data("liverelay gc: binding \(binding) skipped: \(error)\n".utf8))
            }
            for v in removed { print(json(v, dryRun: dryRun).jsonString) }
            let purged = try RetentionStore.purge(db, retentionDays: config.retentionDays, dryRun: dryRun)
            print(
                JSONValue.object([
                    "summary": .object([
                        "dry_run": .bool(dryRun), "versions": .int(Int64(removed.count)),
                        "bytes": .int(removed.reduce(0) { $0 + $1.bytes }),
                        "targets": .int(Int64(purged.targets)), "operations": .int(Int64(purged.operations)),
                        "idempotency_records": .int(Int64(purged.idempotencyRecords)),
                        "retention_days": .int(Int64(config.retentionDays))
                    ])
                ]).jsonString)
        }
    }

    /// The line printed (and logged by the maintenance service) for one version.
    static func json(_ v: CollectedVersion, dryRun: Bool) -> JSONValue {
        .object([
            "action": .string(dryRun ? "would_remove" : "removed"), "template_version": .string(v.id), "tenant_id": .string(v.tenantId),
            "installation_id": .string(v.installationId), "binding_id": .string(v.bindingId), "bytes": .int(v.bytes),
            "created_at": .string(Timestamp.format(v.createdAt)),
            "last_reference_ended_at": .string(Timestamp.format(v.lastReferenceEndedAt)),
            "collectable_since": .string(Timestamp.format(v.collectableAt))
        ])
    }
}
