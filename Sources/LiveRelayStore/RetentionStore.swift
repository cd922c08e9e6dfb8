import Foundation
import LiveRelayCore
import Postgres

/// One template version with the retention facts `Retention` decides on.
public struct RetentionCandidate: Sendable, Equatable {
    public let tenantId: String
    public let installationId: String
    public let bindingId: String
    public let version: Retention.Version
}

/// What the GC removed (or, in a dry run, would remove).
public struct CollectedVersion: Sendable, Equatable {
    public let tenantId: String
    public let installationId: String
    public let bindingId: String
    public let id: String
    public let bytes: Int64
    public let createdAt: Date
    public let lastReferenceEndedAt: Date
    public let collectableAt: Date

    public init(
        tenantId: String, installationId: String, bindingId: String, id: String, bytes: Int64, createdAt: Date,
        lastReferenceEndedAt: Date, collectableAt: Date
    ) {
        self.tenantId = tenantId; self.installationId = installationId; self.bindingId = bindingId; self.id = id
        self.bytes = bytes; self.createdAt = createdAt; self.lastReferenceEndedAt = lastReferenceEndedAt; self.collectableAt = collectableAt
    }
}

/// SQL for template-version retention (docs/templates.md): loads each version's pins and the time its
/// last reference ended, computed from the rows that reference it at the moment of asking
/// (start targets, targets, sender keys) plus `template_versions.released_at` — the instant it
/// stopped being a live start target's current version — so no other code has to maintain a
/// counter when a target ends or a key is revoked.
public enum RetentionStore {
    /// One row per version: `pin_target`, `pin_start_target`, `pin_sender_key` and
    /// `last_reference_ended_at` (see `Retention.Version`). `$1` is the clock.
    static func factsSQL(where filter: String) -> String {
        """
        SELECT tv.tenant_id, tv.installation_id, tv.binding_id, tv.id, tv.bundle_bytes, tv.created_at,
          EXISTS (SELECT 1 FROM targets t
                   WHERE t.tenant_id = tv.tenant_id AND t.installation_id = tv.installation_id AND t.template_version = tv.id
                     AND t.status NOT IN ('ended', 'creation_failed')) AS pin_target,
          EXISTS (SELECT 1 FROM start_targets st
                   WHERE st.tenant_id = tv.tenant_id AND st.installation_id = tv.installation_id AND st.binding_id = tv.binding_id
                     AND st.current_template_version = tv.id AND st.status <> 'retired') AS pin_start_target,
          EXISTS (SELECT 1 FROM start_targets st JOIN sender_keys k ON k.tenant_id = st.tenant_id AND st.id = ANY (k.targets)
                   WHERE st.tenant_id = tv.tenant_id AND st.installation_id = tv.installation_id AND st.binding_id = tv.binding_id
                     AND st.current_template_version = tv.id
                     AND (k.revoked_at IS NULL OR k.revoked_at > $1::timestamptz)
                     AND (k.expires_at IS NULL OR k.expires_at > $1::timestamptz)) AS pin_sender_key,
          GREATEST(
            tv.released_at,
            (SELECT max(st.updated_at) FROM start_targets st
              WHERE st.tenant_id = tv.tenant_id AND st.installation_id = tv.installation_id AND st.binding_id = tv.binding_id
                AND st.current_template_version = tv.id AND st.status = 'retired'),
            (SELECT max(t.ended_at) FROM targets t
              WHERE t.tenant_id = tv.tenant_id AND t.installation_id = tv.installation_id AND t.template_version = tv.id
                AND t.status IN ('ended', 'creation_failed')),
            (SELECT max(LEAST(COALESCE(k.revoked_at, 'infinity'), COALESCE(k.expires_at, 'infinity')))
               FROM start_targets st JOIN sender_keys k ON k.tenant_id = st.tenant_id AND st.id = ANY (k.targets)
              WHERE st.tenant_id = tv.tenant_id AND st.installation_id = tv.installation_id AND st.binding_id = tv.binding_id
                AND st.current_template_version = tv.id
                AND (k.revoked_at <= $1::timestamptz OR k.expires_at <= $1::timestamptz))
          ) AS last_reference_ended_at
          FROM template_versions tv
         WHERE \(filter)
         ORDER BY tv.tenant_id, tv.installation_id, tv.binding_id, tv.created_at, tv.id
        """
    }

    static func candidate(_ r: PostgresRow) throws -> RetentionCandidate {
        var pins: Set<Retention.Pin> = []
        if try r.bool("pin_target") { pins.insert(.target) }
        if try r.bool("pin_start_target") { pins.insert(.startTarget) }
        if try r.bool("pin_sender_key") { pins.insert(.senderKey) }
        return RetentionCandidate(
            tenantId: try r.string("tenant_id"), installationId: try r.string("installation_id"), bindingId: try r.string("binding_id"),
            version: Retention.Version(
                id: try r.string("id"), bytes: try r.int64("bundle_bytes"), createdAt: try r.date("created_at"),
                pins: pins, lastReferenceEndedAt: try r.optionalDate("last_reference_ended_at")))
    }

    /// Every stored version of one binding with its retention facts at `now`, oldest first.
    /// Lock the binding row first (`BindingStore.upsertLocked`/`get(forUpdate:)`) so the
    /// answer holds until commit.
    public static func bindingVersions(
        _ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String,
        now: Date
    ) throws -> [Retention.Version] {
        try c.query(
            factsSQL(where: "tv.tenant_id = $2 AND tv.installation_id = $3 AND tv.binding_id = $4"),
            [now, tenantId, installationId, bindingId]
        ).map { try candidate($0).version }
    }

    /// Every version of every tenant that is not the current version of a live start target
    /// (those are pinned by definition), with its facts at `now`. Needs the system scope.
    public static func unpinnedCandidates(_ c: PostgresConnection, now: Date) throws -> [RetentionCandidate] {
        try c.query(
            factsSQL(
                where: """
                    NOT EXISTS (SELECT 1 FROM start_targets st
                                 WHERE st.tenant_id = tv.tenant_id AND st.installation_id = tv.installation_id AND st.binding_id = tv.binding_id
                                   AND st.current_template_version = tv.id AND st.status <> 'retired')
                    """), [now]
        ).map(candidate)
    }

    /// One GC pass at `now` (docs/templates.md): finds the collectable versions of every tenant, then per
    /// binding, in that tenant's transaction with the binding row locked, decides again and
    /// deletes them (unless `dryRun`). A failure on one binding is reported through `onError`
    /// and the pass goes on. Returns what was removed (or would be), oldest first per binding.
    public static func collect(
        _ db: Database, now: Date, dryRun: Bool,
        onError: (String, Error) -> Void = { _, _ in }
    ) throws -> [CollectedVersion] {
        let all = try db.system { c in try unpinnedCandidates(c, now: now) }
        struct Key: Hashable { let tenant: String, installation: String, binding: String }
        var bindings: [Key] = []
        var seen: Set<Key> = []
        for cand in all where cand.version.isCollectable(now: now) {
            let k = Key(tenant: cand.tenantId, installation: cand.installationId, binding: cand.bindingId)
            if seen.insert(k).inserted { bindings.append(k) }
        }
        var out: [CollectedVersion] = []
        for k in bindings {
            do {
                let removed = try db.tenant(k.tenant) { c -> [CollectedVersion] in
                    if !dryRun {
                        guard try BindingStore.get(c, tenantId: k.tenant, installationId: k.installation, id: k.binding, forUpdate: true) != nil
                        else { return [] }
                    }
                    let versions = try bindingVersions(c, tenantId: k.tenant, installationId: k.installation, bindingId: k.binding, now: now)
                    var done: [CollectedVersion] = []
                    for v in Retention.collectable(versions, now: now) {
                        if !dryRun {
                            guard try TemplateStore.delete(c, tenantId: k.tenant, installationId: k.installation, bindingId: k.binding, id: v.id)
                            else { continue }
                        }
                        done.append(
                            CollectedVersion(
                                tenantId: k.tenant, installationId: k.installation, bindingId: k.binding, id: v.id,
                                bytes: v.bytes, createdAt: v.createdAt,
                                lastReferenceEndedAt: v.lastReferenceEndedAt ?? v.createdAt,
                                collectableAt: v.collectableAt ?? now))
                    }
                    return done
                }
                out.append(contentsOf: removed)
            } catch {
                onError("\(k.tenant)/\(k.installation)/\(k.binding)", error)
            }
        }
        return out
    }
}
