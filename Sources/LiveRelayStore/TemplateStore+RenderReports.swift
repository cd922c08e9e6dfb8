import Foundation
import JSON
import Postgres

/// The facts a render report is checked against: the target's owner and current revision.
public struct RenderReportTarget: Sendable, Equatable {
    public let id: String
    public let installationId: String
    public let revision: Int64
    /// The stored `targets.last_render_report` (`{revision, template_version, stage_code, received_at}`), nil if none.
    public let lastRenderReport: JSONValue?
}

/// SQL for device render reports (docs/endpoints.md `…/render-reports`, §6 "a report for an older
/// revision is shown as stale"): kept in `targets.last_render_report`.
extension TemplateStore {
    /// Target `id` of the installation (nil when absent or another installation's).
    public static func renderReportTarget(
        _ c: PostgresConnection, tenantId: String, installationId: String, targetId: String
    ) throws -> RenderReportTarget? {
        try c.query(
            """
            SELECT id, installation_id, revision, last_render_report::text AS last_render_report FROM targets
             WHERE tenant_id = $1 AND id = $2 AND installation_id = $3
            """, [tenantId, targetId, installationId]
        ).first.map { r in
            RenderReportTarget(
                id: try r.string("id"), installationId: try r.string("installation_id"), revision: try r.int64("revision"),
                lastRenderReport: try r.optionalString("last_render_report").map { try JSONValue.parse($0) })
        }
    }

    /// Stores `report` (which carries `revision`) unless the stored report is for a newer
    /// revision: a late report about an older revision never hides the result of a newer one.
    /// Returns the report now stored.
    public static func storeRenderReport(
        _ c: PostgresConnection, tenantId: String, installationId: String, targetId: String,
        report: JSONValue, revision: Int64
    ) throws -> JSONValue? {
        _ = try c.execute(
            """
            UPDATE targets SET last_render_report = $4::jsonb
             WHERE tenant_id = $1 AND id = $2 AND installation_id = $3
               AND (last_render_report IS NULL OR COALESCE((last_render_report->>'revision')::bigint, 0) <= $5)
            """, [tenantId, targetId, installationId, report.jsonString, revision])
        return try renderReportTarget(c, tenantId: tenantId, installationId: installationId, targetId: targetId)?.lastRenderReport
    }
}
