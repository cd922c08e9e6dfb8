import JSON

/// Turns a schema document into a `SchemaNode` tree, refusing anything outside docs/limits.md.
struct SchemaCompiler {
    let rootJSON: JSONValue
    private(set) var nodeCount = 0

    init(rootJSON: JSONValue) { self.rootJSON = rootJSON }

    static let supported = "type, enum, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, minimum, maximum"
    /// JSON Schema keywords docs/limits.md names as refused (others are "unknown").
    static let refused: Set<String> = ["$ref", "pattern", "allOf", "anyOf", "oneOf", "not", "default"]

    mutating func compileRoot() throws -> SchemaNode {
        try compile(rootJSON, path: [], depth: 1)
    }

    private func fail(_ path: [String], _ message: String, extra: [String: JSONValue] = [:]) -> DomainError {
        var d = extra
        let pointer = SchemaPointer.make(path)
        d["pointer"] = .string(pointer)
        return DomainError(status: 400, code: "INVALID_STATE_SCHEMA", message: "\(message) (at \"\(pointer)\")", details: d)
    }

    private func failLimit(_ path: [String], _ message: String, limit: Int, actual: Int) -> DomainError {
        fail(path, message, extra: ["limit": .int(Int64(limit)), "actual": .int(Int64(actual))])
    }

    private mutating func compile(_ json: JSONValue, path: [String], depth: Int) throws -> SchemaNode {
        guard case .object(let o) = json else {
            throw fail(
                path,
                path.isEmpty
                    ? "the state schema must be a JSON object"
                    : "a state schema must be a JSON object, not \(SchemaJSON.kind(json))")
        }
        if depth > StateLimits.maxSchemaDepth {
            let actual = depth - 1 + Self.rawDepth(json)
            throw failLimit(
                path, "the state schema is nested \(actual) levels deep; the limit is \(StateLimits.maxSchemaDepth)",
                limit: StateLimits.maxSchemaDepth, actual: actual)
        }
        nodeCount += 1
        if nodeCount > StateLimits.maxSchemaNodes {
            let actual = Self.rawCount(rootJSON)
            throw failLimit(
                path, "the state schema has \(actual) nodes; the limit is \(StateLimits.maxSchemaNodes)",
                limit: StateLimits.maxSchemaNodes, actual: actual)
        }

        var type: SchemaType?
        var enumValues: [JSONValue]?
        var properties: [(name: String, node: SchemaNode)] = []
        var required: [String] = []
        var additional = true
        var items: SchemaNode?
        var counts: [String: Int] = [:]
        var bounds: [String: JSONValue] = [:]

        for key in SchemaJSON.sortedKeys(o) {
            let value = o[key]!
            let at = path + [key]
            switch key {
            case "type":
                guard case .string(let s) = value else {
                    if case .array = value { throw fail(at, "keyword \"type\" must be a single string (type arrays are not supported)") }
                    throw fail(at, "keyword \"type\" must be a string")
                }
                guard let t = SchemaType(rawValue: s) else {
                    throw fail(at, "keyword \"type\" must be one of null, boolean, number, integer, string, array, object")
                }
                type = t
            case "enum":
                enumValues = try compileEnum(value, at: at)
            case "properties":
                guard case .object(let props) = value else { throw fail(at, "keyword \"properties\" must be an object of schemas") }
                if props.count > StateLimits.maxSchemaProperties {
                    throw failLimit(
                        at, "keyword \"properties\" has \(props.count) members; the limit is \(StateLimits.maxSchemaProperties)",
                        limit: StateLimits.maxSchemaProperties, actual: props.count)
                }
                for name in SchemaJSON.sortedKeys(props) {
                    properties.append((name, try compile(props[name]!, path: at + [name], depth: depth + 1)))
                }
            case "required":
                guard case .array(let names) = value else { throw fail(at, "keyword \"required\" must be an array of strings") }
                var seen = Set<String>()
                for (i, n) in names.enumerated() {
                    guard case .string(let s) = n else { throw fail(at + [String(i)], "keyword \"required\" must hold only strings") }
                    guard seen.insert(s).inserted else { throw fail(at + [String(i)], "keyword \"required\" lists \"\(s)\" twice") }
                    required.append(s)
                }
            case "additionalProperties":
                guard case .bool(let b) = value else {
                    throw fail(at, "keyword \"additionalProperties\" must be a boolean (schemas are not supported)")
                }
                additional = b
            case "items":
                if case .array = value { throw fail(at, "keyword \"items\" must be a single schema (tuple form is not supported)") }
                items = try compile(value, path: at, depth: depth + 1)
            case "minItems", "maxItems", "minLength", "maxLength":
                guard let n = value.intValue, n >= 0 else {
                    throw fail(at, "keyword \"\(key)\" must be a non-negative integer")
                }
                counts[key] = Int(n)
            case "minimum", "maximum":
                switch value {
                case .int, .double: bounds[key] = value
                default: throw fail(at, "keyword \"\(key)\" must be a number")
                }
            default:
                if Self.refused.contains(key) {
                    throw fail(at, "state schema keyword \"\(key)\" is not supported; the supported keywords are \(Self.supported)")
                }
                throw fail(at, "unknown state schema keyword \"\(key)\"; the supported keywords are \(Self.supported)")
            }
        }
        return SchemaNode(
            type: type, enumValues: enumValues, properties: properties, required: required,
            additionalProperties: additional, items: items,
            minItems: counts["minItems"], maxItems: counts["maxItems"],
            minLength: counts["minLength"], maxLength: counts["maxLength"],
            minimum: bounds["minimum"], maximum: bounds["maximum"])
    }

    private func compileEnum(_ value: JSONValue, at: [String]) throws -> [JSONValue] {
        guard case .array(let values) = value else { throw fail(at, "keyword \"enum\" must be an array of primitive values") }
        if values.isEmpty { throw fail(at, "keyword \"enum\" must list at least one value") }
        if values.count > StateLimits.maxSchemaEnumValues {
            throw failLimit(
                at, "keyword \"enum\" has \(values.count) values; the limit is \(StateLimits.maxSchemaEnumValues)",
                limit: StateLimits.maxSchemaEnumValues, actual: values.count)
        }
        for (i, v) in values.enumerated() {
            switch v {
            case .null, .bool, .int, .double, .string: continue
            case .array, .object: throw fail(at + [String(i)], "keyword \"enum\" must hold only null, boolean, number or string values")
            }
        }
        return values
    }

    /// Schema nodes reachable through `properties` members and `items` (for `details.actual`).
    static func rawCount(_ json: JSONValue) -> Int {
        guard case .object(let o) = json else { return 0 }
        var n = 1
        if case .object(let props)? = o["properties"] { for v in props.values { n += rawCount(v) } }
        if let items = o["items"] { n += rawCount(items) }
        return n
    }

    /// Schema depth below and including `json` (1 for a schema without children).
    static func rawDepth(_ json: JSONValue) -> Int {
        guard case .object(let o) = json else { return 0 }
        var child = 0
        if case .object(let props)? = o["properties"] { for v in props.values { child = max(child, rawDepth(v)) } }
        if let items = o["items"] { child = max(child, rawDepth(items)) }
        return 1 + child
    }
}
