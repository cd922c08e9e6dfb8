import Foundation
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore

extension DeviceHandlers {
    /// `POST /v1/installations/{id}/targets/{tgt}/render-reports {revision, template_version,
    /// stage_code, idempotency_key?}` → 200 `{target_id, revision, stored, report,
    /// last_render_report}`. Diagnostics only: any other member (e.g. business `state`) →
    /// `400 INVALID_REQUEST` naming it. A report for an older revision than the target's is
    /// stored (unless a report for a newer revision already is) and always shown `stale: true`;
    /// a revision above the target's → `400` field `revision`.
    static func renderReport(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        let me = try InstallationHandlers.requireInstallation(ctx, req)
        let targetId = req.pathParameters["tgt"] ?? ""
        var (r, _) = try Endpoint.reader(req)
        guard let revision = try r.optionalInt("revision", 1...Int64.max) else { throw DomainError.invalid("revision", "revision is required") }
        let templateVersion = try r.string("template_version", maxLength: 128)
        let stageCode = try stage(&r)
        _ = try r.optionalString("idempotency_key", minLength: 1, maxLength: 255)
        try r.finish()
        if me.retired { throw InstallationHandlers.retiredError() }
        let now = ctx.now()
        let report: JSONValue = .object([
            "revision": .int(revision), "template_version": .string(templateVersion),
            "stage_code": stageCode, "received_at": J.ts(now)
        ])
        let (target, stored) = try ctx.db.tenant(me.tenant) { c -> (RenderReportTarget, JSONValue?) in
            // The credential cache may not know about a disconnect yet; the row does.
            if try InstallationStore.get(c, tenantId: me.tenant, id: me.id)?.status != "active" { throw InstallationHandlers.retiredError() }
            guard let t = try TemplateStore.renderReportTarget(c, tenantId: me.tenant, installationId: me.id, targetId: targetId) else {
                throw Endpoint.notFound("target")
            }
            if revision > t.revision {
                throw DomainError.invalid(
                    "revision", "revision \(revision) is newer than the target's current revision \(t.revision)",
                    extra: ["current_revision": .int(t.revision)])
            }
            let kept = try TemplateStore.storeRenderReport(
                c, tenantId: me.tenant, installationId: me.id, targetId: targetId,
                report: report, revision: revision)
            return (t, kept)
        }
        return .json(
            200,
            .object([
                "target_id": .string(target.id), "revision": .int(target.revision),
                "stored": .bool(stored == report),
                "report": renderReportView(report, currentRevision: target.revision),
                "last_render_report": renderReportView(stored, currentRevision: target.revision)
            ]))
    }

    /// `stage_code`: a string of 1–64 characters or a non-negative integer, as the device sends it.
    static func stage(_ r: inout RequestReader) throws -> JSONValue {
        let v = try r.requiredRaw("stage_code")
        switch v {
        case .string(let s) where (1...64).contains(s.unicodeScalars.count) && !s.unicodeScalars.contains(where: { $0.value < 0x20 }):
            return v
        case .int(let i) where i >= 0:
            return v
        default:
            throw DomainError.invalid("stage_code", "stage_code must be a string of 1–64 printable characters or a non-negative integer")
        }
    }

    /// A stored render report as shown on a target (docs/endpoints.md): `{revision, template_version,
    /// stage_code, stale, received_at}`, `stale` when it is about an older revision than the
    /// target's current one; `null` when there is none. For the target read endpoints too.
    static func renderReportView(_ stored: JSONValue?, currentRevision: Int64) -> JSONValue {
        guard let stored, case .object(var o) = stored else { return .null }
        let rev = o["revision"]?.intValue ?? 0
        o["stale"] = .bool(rev < currentRevision)
        return .object(o)
    }
}
