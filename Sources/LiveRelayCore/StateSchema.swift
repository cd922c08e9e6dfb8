import JSON

/// A compiled state schema: the subset of JSON Schema that docs/limits.md allows for a template
/// version's pinned `schema`, ready to validate `state` documents many times.
///
/// Keywords (docs/limits.md, JSON Schema meanings): `type` (one string of `null`, `boolean`,
/// `number`, `integer`, `string`, `array`, `object`), `enum` (primitives), `properties`,
/// `required`, `additionalProperties` (boolean), `items` (one schema), `minItems`, `maxItems`,
/// `minLength`, `maxLength`, `minimum`, `maximum`. Every other keyword is refused by
/// `compile(_:)`.
///
/// Validation semantics:
/// - a keyword applies only to values of its kind (`minLength` ignores a number, `properties`
///   ignores an array …); no keyword implies a type;
/// - properties are optional unless `required`; extra properties are allowed unless
///   `additionalProperties: false`;
/// - `integer` accepts any number with a zero fraction (`1.0`), `number` accepts integers;
/// - string lengths count Unicode code points (`"é"` precomposed and `"😀"` are 1 each);
/// - `enum` compares with JSON equality (`1 == 1.0`; strings by code points);
/// - `minimum`/`maximum` are inclusive and compare `Int64` and `Double` exactly.
///
/// The value is immutable and `Sendable`; compile once (e.g. per template version) and share.
public struct StateSchema: Sendable {
    /// The schema document exactly as compiled (not normalised). Serialize it with
    /// `serialized()` for the canonical form used by `TemplateVersion` (docs/templates.md).
    public let json: JSONValue
    /// Number of schema nodes (the root, every `properties` member and every `items`);
    /// at most `StateLimits.maxSchemaNodes`.
    public let nodeCount: Int

    let root: SchemaNode

    init(json: JSONValue, root: SchemaNode, nodeCount: Int) {
        self.json = json
        self.root = root
        self.nodeCount = nodeCount
    }

    /// Compiles a schema document (docs/limits.md).
    ///
    /// - Parameter schema: the schema as JSON; the root must be an object.
    /// - Returns: the compiled schema.
    /// - Throws: `DomainError` `400 INVALID_STATE_SCHEMA` whose message names the keyword and
    ///   whose `details.pointer` is the RFC 6901 pointer into the schema of the first problem
    ///   (keywords of a node are examined in sorted order, e.g. `"/properties/eta/pattern"`).
    ///   Over a limit of `StateLimits` (depth 12, 256 nodes, 128 properties, 128 enum values)
    ///   the details also hold `limit` and `actual`.
    public static func compile(_ schema: JSONValue) throws -> StateSchema {
        var compiler = SchemaCompiler(rootJSON: schema)
        let root = try compiler.compileRoot()
        return StateSchema(json: schema, root: root, nodeCount: compiler.nodeCount)
    }

    /// Validates `state` against the schema.
    ///
    /// - Returns: `nil` when valid; otherwise the first violation in a deterministic order:
    ///   at each node `type`, `enum`, then the kind's keywords (`minLength`, `maxLength`;
    ///   `minimum`, `maximum`; `minItems`, `maxItems`, then items by index; `required` in
    ///   declared order, then members in sorted key order (UTF-8 byte order), each checked
    ///   against `properties` or `additionalProperties`).
    /// - Complexity: O(size of the state parts the schema reaches); allocation-free when valid
    ///   (a violation is recomputed in sorted order to build its pointer).
    public func validate(_ state: JSONValue) -> SchemaViolation? {
        let fast = SchemaValidator(sorted: false)
        guard fast.visit(state, root) != nil else { return nil }
        let ordered = SchemaValidator(sorted: true)
        guard let found = ordered.visit(state, root) else { return nil }  // unreachable in practice
        return found.violation()
    }

    /// Validates `state` and throws on the first violation (docs/write-semantics.md rule 8).
    ///
    /// - Throws: `DomainError` `422 STATE_SCHEMA_MISMATCH` with `details.pointer`, the RFC 6901
    ///   pointer of the first violation in the state (`""` for the root). Depth and "must be an
    ///   object" rules are not checked here: call `checkStateShape(_:field:)` first.
    public func check(_ state: JSONValue) throws {
        guard let v = validate(state) else { return }
        throw DomainError(
            status: 422, code: "STATE_SCHEMA_MISMATCH",
            message: "state does not match the template's schema at \"\(v.pointer)\": \(v.message)",
            details: ["pointer": .string(v.pointer)])
    }
}

/// The first place where a state document breaks its schema (see `StateSchema.validate(_:)`).
public struct SchemaViolation: Sendable, Equatable, CustomStringConvertible {
    /// RFC 6901 JSON pointer into the state (`""` is the whole state, `"/eta"`, `"/stops/0"`).
    /// For `required` it points at the object missing the member; for
    /// `additionalProperties` at the extra member.
    public let pointer: String
    /// The schema keyword that failed, e.g. `"type"`, `"maxLength"`, `"required"`.
    public let keyword: String
    /// One sentence for a developer (never contains state values beyond key names).
    public let message: String

    public var description: String { "\(pointer) \(keyword): \(message)" }
}

/// RFC 6901 JSON pointers (internal helper; errors expose pointers as plain strings).
enum SchemaPointer {
    /// Escapes one reference token: `~` → `~0`, `/` → `~1`.
    static func escape(_ token: String) -> String {
        guard token.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return token }
        var out = ""
        for ch in token.unicodeScalars {
            switch ch {
            case "~": out += "~0"
            case "/": out += "~1"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    /// Joins reference tokens (unescaped) into a pointer: `["a/b", "0"]` → `"/a~1b/0"`; `[]` → `""`.
    static func make(_ tokens: some Sequence<String>) -> String {
        var s = ""
        for t in tokens { s += "/"; s += escape(t) }
        return s
    }
}
