import Foundation
import Postgres

/// The database role a LiveRelay process connects as (`pg_roles` of `current_user`).
public struct DatabaseRole: Sendable, Equatable {
    /// `rolname` (the session's `current_user`).
    public let name: String
    /// `rolsuper`: row-level security does not apply to a superuser.
    public let superuser: Bool
    /// `rolbypassrls`: row-level security does not apply to this role.
    public let bypassRLS: Bool
}

/// Read-only catalog and clock queries for `liverelay doctor` (docs/operations.md "liverelay
/// doctor"). None of them reads tenant data.
public enum DoctorStore {
    /// The role of this session.
    public static func role(_ c: PostgresConnection) throws -> DatabaseRole {
        let r = try c.query("SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")[0]
        return DatabaseRole(name: try r.string("rolname"), superuser: try r.bool("rolsuper"), bypassRLS: try r.bool("rolbypassrls"))
    }

    /// `server_version` (e.g. "15.14 (Debian 15.14-0+deb12u1)").
    public static func serverVersion(_ c: PostgresConnection) throws -> String {
        try c.query("SELECT current_setting('server_version') AS v")[0].string("v")
    }

    /// The database server's clock (`clock_timestamp()`), as Unix time in seconds.
    public static func serverClock(_ c: PostgresConnection) throws -> Double {
        try c.query("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")[0].double("now")
    }

    /// Every tenant id in id order (system scope).
    public static func tenantIds(_ c: PostgresConnection) throws -> [String] {
        try c.query("SELECT tenant_id FROM tenants ORDER BY tenant_id").map { try $0.string("tenant_id") }
    }
}
