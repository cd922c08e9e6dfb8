import Postgres

/// What the connecting database role may do beyond ordinary rights (docs/security.md
/// "Database"): a SUPERUSER or BYPASSRLS role is not subject to row-level security, so the
/// tenant boundary would rest on the `tenant_id` filters alone.
public struct RolePrivileges: Sendable, Equatable {
    /// `current_user`.
    public let role: String
    /// `pg_roles.rolsuper`.
    public let superuser: Bool
    /// `pg_roles.rolbypassrls`.
    public let bypassRLS: Bool

    /// Reads the privileges of the pool's role. Throws `PostgresError` when the database cannot be asked.
    public static func of(_ pool: PostgresPool) throws -> RolePrivileges {
        try pool.withConnection { c in
            let r = try c.query("SELECT current_user::text AS role, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")[0]
            return RolePrivileges(role: try r.string("role"), superuser: try r.bool("rolsuper"), bypassRLS: try r.bool("rolbypassrls"))
        }
    }

    /// True when row-level security does not apply to this role.
    public var isPrivileged: Bool { superuser || bypassRLS }

    /// One line naming the role and why it is refused; nil for an ordinary role.
    public var refusal: String? {
        guard isPrivileged else { return nil }
        let what = [superuser ? "SUPERUSER" : nil, bypassRLS ? "BYPASSRLS" : nil].compactMap { $0 }.joined(separator: " and ")
        return
            "database role \(role) has \(what), so row-level security does not separate tenants; connect as an ordinary role (NOSUPERUSER NOBYPASSRLS) or set LIVERELAY_ALLOW_PRIVILEGED_ROLE=1 to run anyway"
    }
}
