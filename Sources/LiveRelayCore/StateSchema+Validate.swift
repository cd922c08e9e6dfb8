import JSON

/// A violation found while unwinding: the pointer's tokens are collected innermost first.
struct SchemaFinding {
    var reversedTokens: [String] = []
    let keyword: String
    let message: String

    func violation() -> SchemaViolation {
        SchemaViolation(pointer: SchemaPointer.make(reversedTokens.reversed()), keyword: keyword, message: message)
    }
}

/// Walks a state document along a compiled schema.
///
/// With `sorted == false` object members are visited in dictionary order (no allocation);
/// used to answer "is it valid". With `sorted == true` the violation reported is the one a
/// visit in UTF-8 key order would meet first, so it is deterministic.
struct SchemaValidator {
    let sorted: Bool

    init(sorted: Bool) { self.sorted = sorted }

    func visit(_ v: JSONValue, _ n: SchemaNode) -> SchemaFinding? {
        if let t = n.type, !t.matches(v) {
            return SchemaFinding(keyword: "type", message: "expected \(t.rawValue), found \(SchemaJSON.kind(v))")
        }
        if let values = n.enumValues, !values.contains(where: { SchemaJSON.primitiveEqual($0, v) }) {
            return SchemaFinding(keyword: "enum", message: "value is not one of the \(values.count) allowed by enum")
        }
        switch v {
        case .string(let s):
            return checkString(s, n)
        case .int, .double:
            return checkNumber(v, n)
        case .array(let a):
            return checkArray(a, n)
        case .object(let o):
            return n.hasObjectRules ? checkObject(o, n) : nil
        case .null, .bool:
            return nil
        }
    }

    @inline(__always)
    private func checkString(_ s: String, _ n: SchemaNode) -> SchemaFinding? {
        if n.minLength == nil && n.maxLength == nil { return nil }
        let bytes = s.utf8.count
        // Code points ≤ UTF-8 bytes ≤ 4 × code points: count only when the bytes cannot decide.
        if let min = n.minLength, bytes < min || (bytes + 3) / 4 < min {
            let cp = s.unicodeScalars.count
            if cp < min { return SchemaFinding(keyword: "minLength", message: "string has \(cp) code points, fewer than minLength \(min)") }
        }
        if let max = n.maxLength, bytes > max {
            let cp = s.unicodeScalars.count
            if cp > max { return SchemaFinding(keyword: "maxLength", message: "string has \(cp) code points, more than maxLength \(max)") }
        }
        return nil
    }

    @inline(__always)
    private func checkNumber(_ v: JSONValue, _ n: SchemaNode) -> SchemaFinding? {
        if let lo = n.minimum, let c = SchemaJSON.compare(v, lo), c < 0 {
            return SchemaFinding(keyword: "minimum", message: "number is less than minimum \(lo.jsonString)")
        }
        if let hi = n.maximum, let c = SchemaJSON.compare(v, hi), c > 0 {
            return SchemaFinding(keyword: "maximum", message: "number is greater than maximum \(hi.jsonString)")
        }
        return nil
    }

    private func checkArray(_ a: [JSONValue], _ n: SchemaNode) -> SchemaFinding? {
        if let min = n.minItems, a.count < min {
            return SchemaFinding(keyword: "minItems", message: "array has \(a.count) items, fewer than minItems \(min)")
        }
        if let max = n.maxItems, a.count > max {
            return SchemaFinding(keyword: "maxItems", message: "array has \(a.count) items, more than maxItems \(max)")
        }
        guard let items = n.items else { return nil }
        for i in a.indices {
            if var f = visit(a[i], items) {
                f.reversedTokens.append(String(i))
                return f
            }
        }
        return nil
    }

    private func checkObject(_ o: [String: JSONValue], _ n: SchemaNode) -> SchemaFinding? {
        let table = n.properties
        if sorted {
            for name in n.required where !SchemaJSON.hasMember(o, name) {
                return SchemaFinding(keyword: "required", message: "required property \"\(name)\" is missing")
            }
            // The failing member with the smallest key (UTF-8 order), without sorting:
            // members sorting after the best so far are skipped.
            var best: (key: String, finding: SchemaFinding)?
            for (key, value) in o {
                if let b = best, !SchemaJSON.utf8Less(key, b.key) { continue }
                if let f = member(key, value, n) { best = (key, f) }
            }
            return best?.finding
        }
        // Any order: one pass over the members, counting the required ones seen.
        var requiredSeen = 0
        for (key, value) in o {
            if let e = table.find(key) {
                if table.isRequired[e] { requiredSeen += 1 }
                if var f = visit(value, table.nodes[e]) { f.reversedTokens.append(key); return f }
            } else if !n.additionalProperties {
                return SchemaFinding(keyword: "additionalProperties", message: "property is not allowed")
            }
        }
        if requiredSeen != table.requiredCount || n.requiredElsewhere.contains(where: { !SchemaJSON.hasMember(o, $0) }) {
            return SchemaFinding(keyword: "required", message: "a required property is missing")
        }
        return nil
    }

    @inline(__always)
    private func member(_ key: String, _ value: JSONValue, _ n: SchemaNode) -> SchemaFinding? {
        if let e = n.properties.find(key) {
            guard var f = visit(value, n.properties.nodes[e]) else { return nil }
            f.reversedTokens.append(key)
            return f
        }
        if n.additionalProperties { return nil }
        var f = SchemaFinding(keyword: "additionalProperties", message: "property \"\(key)\" is not allowed by the schema")
        f.reversedTokens.append(key)
        return f
    }
}
