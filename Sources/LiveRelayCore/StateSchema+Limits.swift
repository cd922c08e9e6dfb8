import JSON

/// docs/limits.md limits on state documents and state schemas (also reported by
/// `GET /v1/remote-updates/capabilities`).
public enum StateLimits {
    /// Maximum nesting depth of a state document (`JSONValue.depth`: `{}` is 1,
    /// `{"a":{}}` is 2). Applies with or without a schema.
    public static let maxDepth = 12
    /// Maximum depth of a schema: the root schema is depth 1, each `properties` member or
    /// `items` schema one more.
    public static let maxSchemaDepth = 12
    /// Maximum number of schema nodes (root + every `properties` member + every `items`).
    public static let maxSchemaNodes = 256
    /// Maximum number of members of one node's `properties`.
    public static let maxSchemaProperties = 128
    /// Maximum number of values of one node's `enum`.
    public static let maxSchemaEnumValues = 128
}

extension StateSchema {
    /// docs/limits.md "state without schema": `state` must be a JSON object nested at most
    /// `StateLimits.maxDepth` (12) levels deep. Call it before schema validation too.
    ///
    /// - Parameters:
    ///   - state: the state document.
    ///   - field: the request field named in errors (dotted path, default `"state"`).
    /// - Throws: `DomainError` `400 INVALID_REQUEST` with `details.field` when not an object;
    ///   with `details.field`, `details.limit` (12) and `details.actual` (the depth) when too deep.
    public static func checkStateShape(_ state: JSONValue, field: String = "state") throws {
        guard case .object = state else {
            throw DomainError.invalid(field, "\(field) must be a JSON object, not \(SchemaJSON.kind(state))")
        }
        let depth = SchemaJSON.depth(state)
        if depth > StateLimits.maxDepth {
            throw DomainError.limit(
                field, "\(field) is nested \(depth) levels deep; the limit is \(StateLimits.maxDepth)",
                limit: StateLimits.maxDepth, actual: depth)
        }
    }
}
