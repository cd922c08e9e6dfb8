import Foundation
import JSON
import Postgres

/// A stored template version (docs/glossary.md, docs/templates.md): immutable renderer identity + pinned schema +
/// declared resources of one activity type of a binding. The schema is what start/update
/// validate state against.
public struct TemplateVersionRecord: Sendable, Equatable {
    public let tenantId: String
    public let installationId: String
    public let bindingId: String
    /// `tv_…`, derived from the content (`TemplateVersion.derive`).
    public let id: String
    public let activityType: String
    public let attributesType: String
    public let rendererDigest: String
    /// The schema as prepared; nil when the template has none.
    public let schema: JSONValue?
    /// `[{path, sha256, bytes}]`.
    public let resources: JSONValue
    public let bundleBytes: Int64
    public let bundleModules: Int
    public let bundleFiles: Int
    public let createdAt: Date
    /// When it stopped being the current version of a live start target (nil while current).
    public let releasedAt: Date?

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); installationId = try r.string("installation_id"); bindingId = try r.string("binding_id")
        id = try r.string("id"); activityType = try r.string("activity_type"); attributesType = try r.string("attributes_type")
        rendererDigest = try r.string("renderer_digest")
        schema = try r.optionalString("schema").map { try JSONValue.parse($0) }
        resources = try JSONValue.parse(r.string("resources"))
        bundleBytes = try r.int64("bundle_bytes"); bundleModules = try r.int("bundle_modules"); bundleFiles = try r.int("bundle_files")
        createdAt = try r.date("created_at"); releasedAt = try r.optionalDate("released_at")
    }
}

/// The content of a new template version (from `PrepareManifest`).
public struct NewTemplateVersion: Sendable {
    public let id: String
    public let activityType: String
    public let attributesType: String
    public let rendererDigest: String
    public let schema: JSONValue?
    public let resources: JSONValue
    public let bundleBytes: Int
    public let bundleModules: Int
    public let bundleFiles: Int

    public init(
        id: String, activityType: String, attributesType: String, rendererDigest: String, schema: JSONValue?,
        resources: JSONValue, bundleBytes: Int, bundleModules: Int, bundleFiles: Int
    ) {
        self.id = id; self.activityType = activityType; self.attributesType = attributesType; self.rendererDigest = rendererDigest
        self.schema = schema; self.resources = resources; self.bundleBytes = bundleBytes; self.bundleModules = bundleModules
        self.bundleFiles = bundleFiles
    }
}

/// SQL for template versions.
public enum TemplateStore {
    static let columns = """
        tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest, schema::text AS schema,
        resources::text AS resources, bundle_bytes, bundle_modules, bundle_files, created_at, released_at
        """

    /// Template version `id` of the binding.
    public static func get(
        _ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String, id: String
    ) throws -> TemplateVersionRecord? {
        try c.query(
            """
            SELECT \(columns) FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND id = $4
            """, [tenantId, installationId, bindingId, id]
        ).first.map(TemplateVersionRecord.init(row:))
    }

    /// Template version `id` of the installation, whatever its binding (ids embed the binding,
    /// so at most one row matches).
    public static func get(_ c: PostgresConnection, tenantId: String, installationId: String, id: String) throws -> TemplateVersionRecord? {
        try c.query(
            """
            SELECT \(columns) FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 AND id = $3 LIMIT 1
            """, [tenantId, installationId, id]
        ).first.map(TemplateVersionRecord.init(row:))
    }

    /// Stores a new version (current from birth: `released_at` NULL).
    public static func insert(
        _ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String,
        version v: NewTemplateVersion, now: Date
    ) throws {
        try c.execute(
            """
            INSERT INTO template_versions (tenant_id, installation_id, binding_id, id, activity_type, attributes_type, renderer_digest,
                                           schema, resources, bundle_bytes, bundle_modules, bundle_files, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11, $12, $13::timestamptz)
            """,
            [
                tenantId, installationId, bindingId, v.id, v.activityType, v.attributesType, v.rendererDigest,
                v.schema.map { $0.jsonString }, v.resources.jsonString, v.bundleBytes, v.bundleModules, v.bundleFiles, now
            ])
    }

    /// Marks the version as no longer the current version of a live start target: its 7-day
    /// retention clock starts at `at` (unless a target or sender key still pins it).
    public static func release(_ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String, id: String, at: Date) throws {
        try c.execute(
            """
            UPDATE template_versions SET released_at = $5::timestamptz
             WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND id = $4
            """, [tenantId, installationId, bindingId, id, at])
    }

    /// Marks the version as current again (`released_at` NULL).
    public static func unrelease(_ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String, id: String) throws {
        try c.execute(
            """
            UPDATE template_versions SET released_at = NULL
             WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND id = $4
            """, [tenantId, installationId, bindingId, id])
    }

    /// Deletes the version; returns whether a row went.
    @discardableResult
    public static func delete(_ c: PostgresConnection, tenantId: String, installationId: String, bindingId: String, id: String) throws -> Bool {
        try c.execute(
            """
            DELETE FROM template_versions WHERE tenant_id = $1 AND installation_id = $2 AND binding_id = $3 AND id = $4
            """, [tenantId, installationId, bindingId, id]) > 0
    }
}
