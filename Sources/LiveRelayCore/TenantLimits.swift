import Foundation
import JSON

/// Per-tenant bounds on rows a tenant's clients can create, and how long finished rows are
/// kept (docs/security.md "Per-tenant caps", "Retention"). Reported by capabilities.
public struct TenantLimits: Sendable, Equatable {
    /// Default of `LIVERELAY_MAX_INSTALLATIONS_PER_TENANT`: active installations per tenant.
    public static let defaultMaxInstallations = 1_000_000
    /// Default of `LIVERELAY_MAX_LIVE_TARGETS_PER_TENANT`: targets per tenant whose status is
    /// not terminal (`ended`, `creation_failed`).
    public static let defaultMaxLiveTargets = 100_000
    /// Default of `LIVERELAY_RETENTION_DAYS`.
    public static let defaultRetentionDays = 30

    /// Most active (not retired) installations one tenant may have.
    public var maxInstallationsPerTenant: Int
    /// Most live (non-terminal) targets one tenant may have.
    public var maxLiveTargetsPerTenant: Int

    public init(
        maxInstallationsPerTenant: Int = TenantLimits.defaultMaxInstallations,
        maxLiveTargetsPerTenant: Int = TenantLimits.defaultMaxLiveTargets
    ) {
        self.maxInstallationsPerTenant = maxInstallationsPerTenant
        self.maxLiveTargetsPerTenant = maxLiveTargetsPerTenant
    }

    /// The cap error, in the style of `409 CHANNEL_LIMIT`: `409 INSTALLATION_LIMIT` (resource
    /// `installations`) or `409 TARGET_LIMIT` (resource `live_targets`), with `details.limit`
    /// (the cap), `details.actual` (rows already there) and `details.resource`. The tenant must
    /// retire installations or end targets first; retrying unchanged does not help.
    public static func exceeded(_ resource: Resource, limit: Int, actual: Int) -> DomainError {
        DomainError(
            status: 409, code: resource == .installations ? "INSTALLATION_LIMIT" : "TARGET_LIMIT",
            message:
                "this tenant already has \(actual) \(resource == .installations ? "active installations" : "live targets"), its limit is \(limit); \(resource == .installations ? "disconnect" : "end") some first",
            details: ["resource": .string(resource.rawValue), "limit": .int(Int64(limit)), "actual": .int(Int64(actual))])
    }

    /// Most live (non-terminal) targets one installation may hold through local start
    /// reservations (`POST /v1/installations/{id}/targets`, docs/security.md "Per-tenant caps").
    /// A device reserves one target per Live Activity it starts, and iOS shows only a few at a
    /// time; without a bound per installation, one installation (anyone with the app's
    /// publishable key can register one) could fill its tenant's whole live-target cap and
    /// lock every remote start out with `409 TARGET_LIMIT`.
    public static let maxLiveTargetsPerInstallation = 64

    /// `409 TARGET_LIMIT` for an installation at `maxLiveTargetsPerInstallation`: `details.resource`
    /// `live_targets_per_installation`, `details.limit`, `details.actual`.
    public static func installationTargetsExceeded(limit: Int, actual: Int) -> DomainError {
        installationCapExceeded("live targets", resource: "live_targets_per_installation", remedy: "end some first", limit: limit, actual: actual)
    }

    /// Most start targets (not retired) one installation may hold: one per (binding, activity
    /// type) it prepared (docs/security.md "Per-tenant caps"). A binding is named by the device,
    /// and each holds up to 64 template versions, so without a bound one installation (anyone
    /// with the app's publishable key can register one) could add rows without end.
    public static let maxStartTargetsPerInstallation = 64

    /// `409 TARGET_LIMIT` for a prepare that would add a start target past
    /// `maxStartTargetsPerInstallation`: `details.resource` `start_targets_per_installation`,
    /// `details.limit`, `details.actual`.
    public static func installationStartTargetsExceeded(limit: Int, actual: Int) -> DomainError {
        installationCapExceeded(
            "start targets", resource: "start_targets_per_installation",
            remedy: "retire a binding first (POST /v1/installations/{id}/bindings/{bnd}/retire)", limit: limit, actual: actual)
    }

    /// The `409 TARGET_LIMIT` of a per-installation cap: `details.resource`, `details.limit`
    /// (the cap), `details.actual` (rows already there); the message names `what` and `remedy`.
    static func installationCapExceeded(_ what: String, resource: String, remedy: String, limit: Int, actual: Int) -> DomainError {
        DomainError(
            status: 409, code: "TARGET_LIMIT", message: "this installation already has \(actual) \(what), its limit is \(limit); \(remedy)",
            details: ["resource": .string(resource), "limit": .int(Int64(limit)), "actual": .int(Int64(actual))])
    }

    /// What a cap counts.
    public enum Resource: String, Sendable {
        /// Active (not retired) installations.
        case installations
        /// Targets not `ended`/`creation_failed`.
        case liveTargets = "live_targets"
    }
}
