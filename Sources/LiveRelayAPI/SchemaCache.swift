import JSON
import LiveRelayCore
import Locking

/// Compiled state schemas by template version, and installation platforms. Template versions are immutable (docs/templates.md:
/// same id, same content), so a compiled schema never goes stale; the cache is only bounded
/// (cleared past `maxEntries`) to cap memory.
final class SchemaCache: Sendable {
    static let shared = SchemaCache()
    static let maxEntries = 10_000
    private let entries = Locked<[String: StateSchema]>([:])
    private let missing = Locked<Set<String>>([])
    private let platforms = Locked<[String: String]>([:])

    /// The compiled schema of `(tenant, installation, templateVersion)`; `load` fetches its
    /// JSON on a miss (nil: the version declares no schema, also remembered).
    func schema(tenant: String, installation: String, templateVersion: String, load: () throws -> JSONValue?) throws -> StateSchema? {
        let key = "\(tenant)|\(installation)|\(templateVersion)"
        if let s = entries.withLock({ $0[key] }) { return s }
        if missing.withLock({ $0.contains(key) }) { return nil }
        guard let json = try load() else {
            missing.withLock { m in
                if m.count >= Self.maxEntries { m.removeAll() }
                m.insert(key)
            }
            return nil
        }
        return try schema(tenant: tenant, installation: installation, templateVersion: templateVersion, json: json)
    }

    /// An installation's platform (`ios`/`android`, fixed at registration); `load` on a miss.
    func platform(tenant: String, installation: String, load: () throws -> String) throws -> String {
        let key = "\(tenant)|\(installation)"
        if let p = platforms.withLock({ $0[key] }) { return p }
        let p = try load()
        platforms.withLock { m in
            if m.count >= Self.maxEntries { m.removeAll() }
            m[key] = p
        }
        return p
    }

    /// The compiled schema of `(tenant, installation, templateVersion)`, compiling `json` on a miss.
    func schema(tenant: String, installation: String, templateVersion: String, json: JSONValue) throws -> StateSchema {
        let key = "\(tenant)|\(installation)|\(templateVersion)"
        if let s = entries.withLock({ $0[key] }) { return s }
        let s = try StateSchema.compile(json)
        entries.withLock { e in
            if e.count >= Self.maxEntries { e.removeAll() }
            e[key] = s
        }
        return s
    }
}
