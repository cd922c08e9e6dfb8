import JSON

/// The `type` keyword's values (docs/limits.md: a single string).
enum SchemaType: String, Sendable, CaseIterable {
    case null, boolean, number, integer, string, array, object

    /// Whether `v` is an instance of this type (JSON Schema: `integer` accepts any number
    /// with a zero fraction, `number` accepts every number).
    @inline(__always)
    func matches(_ v: JSONValue) -> Bool {
        switch (self, v) {
        case (.null, .null), (.boolean, .bool), (.string, .string), (.array, .array), (.object, .object): return true
        case (.number, .int), (.number, .double), (.integer, .int): return true
        case (.integer, .double(let d)): return d.isFinite && d == d.rounded(.towardZero)
        default: return false
        }
    }
}

/// One compiled schema node. Immutable; shared between threads.
final class SchemaNode: Sendable {
    let type: SchemaType?
    /// Primitive values only (null, bool, numbers, strings).
    let enumValues: [JSONValue]?
    /// `properties`, looked up by exact name.
    let properties: PropertyTable
    /// `required` in declared order.
    let required: [String]
    /// Required names that are not among `properties` (checked by lookup in the state).
    let requiredElsewhere: [String]
    let additionalProperties: Bool
    let items: SchemaNode?
    let minItems: Int?
    let maxItems: Int?
    let minLength: Int?
    let maxLength: Int?
    /// `.int` or `.double`.
    let minimum: JSONValue?
    let maximum: JSONValue?
    /// True when any object keyword is present (skips object work otherwise).
    let hasObjectRules: Bool

    init(
        type: SchemaType?, enumValues: [JSONValue]?, properties: [(name: String, node: SchemaNode)], required: [String],
        additionalProperties: Bool, items: SchemaNode?, minItems: Int?, maxItems: Int?, minLength: Int?,
        maxLength: Int?, minimum: JSONValue?, maximum: JSONValue?
    ) {
        self.type = type
        self.enumValues = enumValues
        self.properties = PropertyTable(properties, required: required)
        self.required = required
        let declared = Set(properties.map { Array($0.name.utf8) })
        self.requiredElsewhere = required.filter { !declared.contains(Array($0.utf8)) }
        self.additionalProperties = additionalProperties
        self.items = items
        self.minItems = minItems
        self.maxItems = maxItems
        self.minLength = minLength
        self.maxLength = maxLength
        self.minimum = minimum
        self.maximum = maximum
        self.hasObjectRules = !properties.isEmpty || !required.isEmpty || !additionalProperties
    }
}

/// JSON number and equality rules shared by the compiler and the validator.
enum SchemaJSON {
    /// Exact comparison of two JSON numbers (`.int`/`.double`, mixed allowed):
    /// -1, 0, 1; nil when either is not a number.
    static func compare(_ a: JSONValue, _ b: JSONValue) -> Int? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.double(let x), .double(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.int(let i), .double(let d)): return compare(i, d)
        case (.double(let d), .int(let i)): return -compare(i, d)
        default: return nil
        }
    }

    /// Exact comparison of an `Int64` with a finite `Double` (no rounding through Double).
    static func compare(_ i: Int64, _ d: Double) -> Int {
        if d >= 9_223_372_036_854_775_808.0 { return -1 }
        if d < -9_223_372_036_854_775_808.0 { return 1 }
        let t = d.rounded(.towardZero)
        let ti = Int64(t)
        if i < ti { return -1 }
        if i > ti { return 1 }
        let frac = d - t
        return frac > 0 ? -1 : (frac < 0 ? 1 : 0)
    }

    /// JSON equality of primitives: numbers by value (`1 == 1.0`), strings by code points
    /// (no Unicode normalisation). Arrays/objects never equal here (enum holds primitives).
    static func primitiveEqual(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.string(let x), .string(let y)): return x.utf8.count == y.utf8.count && x.utf8.elementsEqual(y.utf8)
        case (.int, .int), (.int, .double), (.double, .int), (.double, .double): return compare(a, b) == 0
        default: return false
        }
    }

    /// Name of a value's JSON kind for messages.
    static func kind(_ v: JSONValue) -> String {
        switch v {
        case .null: return "null"
        case .bool: return "boolean"
        case .int: return "integer"
        case .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    /// Byte-order (UTF-8) sort of keys: the canonical order of `JSONValue.serialized()`.
    static func sortedKeys<V>(_ o: [String: V]) -> [String] {
        o.keys.sorted(by: utf8Less)
    }

    /// `a < b` by UTF-8 bytes (the order of `JSONValue.serialized()`).
    static func utf8Less(_ a: String, _ b: String) -> Bool {
        var a = a, b = b  // `withUTF8` needs `var` (it makes bridged strings contiguous)
        return a.withUTF8 { pa in
            b.withUTF8 { pb in
                let n = min(pa.count, pb.count)
                for i in 0..<n where pa[i] != pb[i] { return pa[i] < pb[i] }
                return pa.count < pb.count
            }
        }
    }
}
