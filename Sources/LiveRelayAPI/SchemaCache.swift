import JSON
import LiveRelayCore
import Synchronization

/// Compiled state schemas by template version. Template versions are immutable (SPEC §6:
/// same id, same content), so a compiled schema never goes stale; the cache is only bounded
/// (cleared past `maxEntries`) to cap memory.
final class SchemaCache: Sendable {
    static let shared = SchemaCache()
    static let maxEntries = 10_000
    private let entries = Mutex<[String: StateSchema]>([:])

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
