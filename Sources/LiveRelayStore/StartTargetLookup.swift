import Foundation
import JSON
import Postgres

/// What a remote start needs to know about its start target, its installation and the
/// current template version, read (and the start target locked) in one statement.
public struct StartTargetForStart: Sendable {
    public let id: String
    public let installationId: String
    /// `pending`, `ready` or `retired`.
    public let status: String
    public let activityType: String
    public let currentTemplateVersion: String
    public let hasPushToStartToken: Bool
    /// `active` or `retired`.
    public let installationStatus: String
    /// `ios` or `android`.
    public let platform: String
    public let appId: String
    public let hasFCMToken: Bool
    public let attributesType: String?
    /// The current template version's state schema as stored (JSON text), nil without one.
    /// Parsed only when needed (`schema()`): a compiled schema is usually in the process's cache
    /// already (docs/write-path.md "A start reads its target's budget in round trip 1").
    public let schemaText: String?
    /// The priority-10 budget a target made from this start target gets, in priority-10 sends
    /// per hour (`PriorityBudgetSQL.budget`): nil for Android.
    public let priority10Budget: Int?

    /// `schemaText` parsed.
    /// - Throws: `JSONParseError` when the stored text is not JSON (it always is: stored from a parsed document).
    public func schema() throws -> JSONValue? { try schemaText.map { try JSONValue.parse($0, maxDepth: 128) } }
}

extension TargetStore {
    /// The start target `id` of the tenant with its installation and current template, locked.
    public static func startTargetForStart(_ c: PostgresConnection, tenantId: String, id: String) throws -> StartTargetForStart? {
        try c.query(startTargetForStartSQL(lock: "FOR UPDATE OF s"), [tenantId, id]).first.map(decodeStartTarget)
    }

    /// The statement of `startTargetForStart` with the given locking clause; parameters: tenant id, start target id.
    static func startTargetForStartSQL(lock: String) -> String {
        """
        SELECT s.id, s.installation_id, s.status, s.activity_type, s.current_template_version,
               s.push_to_start_token IS NOT NULL AS has_token, i.status AS installation_status, i.platform, i.app_id,
               i.fcm_token IS NOT NULL AS has_fcm, v.attributes_type, v.schema::text AS schema,
               \(PriorityBudgetSQL.budget(installation: "i", tenant: "n")) AS priority10_budget
          FROM start_targets s
          JOIN installations i ON i.tenant_id = s.tenant_id AND i.id = s.installation_id
          LEFT JOIN tenants n ON n.tenant_id = s.tenant_id
          LEFT JOIN template_versions v ON v.tenant_id = s.tenant_id AND v.installation_id = s.installation_id
                                       AND v.binding_id = s.binding_id AND v.id = s.current_template_version
         WHERE s.tenant_id = $1 AND s.id = $2
           \(lock)
        """
    }

    /// A row of `startTargetForStartSQL`.
    static func decodeStartTarget(_ r: PostgresRow) throws -> StartTargetForStart {
        StartTargetForStart(
            id: try r.string("id"), installationId: try r.string("installation_id"), status: try r.string("status"),
            activityType: try r.string("activity_type"), currentTemplateVersion: try r.string("current_template_version"),
            hasPushToStartToken: try r.bool("has_token"), installationStatus: try r.string("installation_status"),
            platform: try r.string("platform"), appId: try r.string("app_id"), hasFCMToken: try r.bool("has_fcm"),
            attributesType: try r.optionalString("attributes_type"), schemaText: try r.optionalString("schema"),
            priority10Budget: try r.optionalInt("priority10_budget"))
    }

    /// Platform of an installation (`ios`/`android`).
    public static func installationPlatform(_ c: PostgresConnection, tenantId: String, installationId: String) throws -> String {
        try c.query("SELECT platform FROM installations WHERE tenant_id = $1 AND id = $2", [tenantId, installationId])[0].string("platform")
    }

    /// The current template version (and its schema) of the installation's start target for
    /// `activityType`, if the installation prepared one: a local start pins it.
    public static func currentTemplate(
        _ c: PostgresConnection, tenantId: String, installationId: String, activityType: String
    ) throws -> (String, JSONValue?)? {
        guard
            let r = try c.query(
                """
                SELECT s.current_template_version, v.schema::text AS schema FROM start_targets s
                  LEFT JOIN template_versions v ON v.tenant_id = s.tenant_id AND v.installation_id = s.installation_id
                                               AND v.binding_id = s.binding_id AND v.id = s.current_template_version
                 WHERE s.tenant_id = $1 AND s.installation_id = $2 AND s.activity_type = $3 AND s.status <> 'retired'
                 ORDER BY s.updated_at DESC LIMIT 1
                """, [tenantId, installationId, activityType]
            ).first
        else { return nil }
        return (try r.string("current_template_version"), try r.optionalString("schema").map { try JSONValue.parse($0, maxDepth: 128) })
    }
}
