import JSON
import LiveRelayCore
import XCTest
import LiveRelayTestSupport

/// Seeded random JSON documents and schemas, checked against a naive reference validator.
final class StateSchemaFuzzTests: XCTestCase {
    static let keys = ["a", "b", "é", "a/b", "m~n", "", "😀", "e\u{301}"]
    static let strings = ["", "x", "\u{E9}", "e\u{301}", "😀", "abcd", "~/", "🇫🇷!", "long string value"]
    static let types = ["null", "boolean", "number", "integer", "string", "array", "object"]

    func primitive(_ r: inout SplitMix64) -> JSONValue {
        switch Int.random(in: 0..<9, using: &r) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &r))
        case 2, 3: return .int(Int64.random(in: -5...5, using: &r))
        case 4: return .int([Int64.max, Int64.min, 1 << 53, 1_000_000].randomElement(using: &r)!)
        case 5: return .double([1.0, 1.5, -2.0, 0.25, 1e300, -0.0, 3.0].randomElement(using: &r)!)
        default: return .string(Self.strings.randomElement(using: &r)!)
        }
    }

    func value(_ r: inout SplitMix64, depth: Int) -> JSONValue {
        let k = Int.random(in: 0..<(depth > 5 ? 6 : 10), using: &r)
        if k < 6 { return primitive(&r) }
        let n = Int.random(in: 0...4, using: &r)
        if k < 8 { return .array((0..<n).map { _ in value(&r, depth: depth + 1) }) }
        var o: [String: JSONValue] = [:]
        for _ in 0..<n { o[Self.keys.randomElement(using: &r)!] = value(&r, depth: depth + 1) }
        return .object(o)
    }

    /// Mostly valid schemas; `broken` adds occasional invalid keywords or values.
    func schema(_ r: inout SplitMix64, depth: Int, broken: Bool) -> JSONValue {
        var o: [String: JSONValue] = [:]
        func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &r) < p }
        if chance(0.5) { o["type"] = .string(Self.types.randomElement(using: &r)!) }
        if chance(0.15) { o["enum"] = .array((0..<Int.random(in: 1...4, using: &r)).map { _ in primitive(&r) }) }
        if depth < 5, chance(0.4) {
            var props: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...3, using: &r) {
                props[Self.keys.randomElement(using: &r)!] = schema(&r, depth: depth + 1, broken: broken)
            }
            o["properties"] = .object(props)
        }
        if chance(0.2) { o["required"] = .array(Array(Set((0..<2).map { _ in Self.keys.randomElement(using: &r)! })).map { .string($0) }) }
        if chance(0.2) { o["additionalProperties"] = .bool(Bool.random(using: &r)) }
        if depth < 5, chance(0.3) { o["items"] = schema(&r, depth: depth + 1, broken: broken) }
        for kw in ["minItems", "maxItems", "minLength", "maxLength"] where chance(0.12) { o[kw] = .int(Int64.random(in: 0...4, using: &r)) }
        for kw in ["minimum", "maximum"] where chance(0.12) { o[kw] = chance(0.5) ? .int(Int64.random(in: -3...3, using: &r)) : .double(0.5) }
        if broken, chance(0.05) {
            let bad: [(String, JSONValue)] = [
                ("pattern", .string("x")), ("format", .string("uri")), ("type", .array([.string("string")])),
                ("minLength", .int(-1)), ("items", .array([])), ("additionalProperties", .object([:])),
                ("enum", .array([.array([])])), ("$ref", .string("#")), ("properties", .object(["q": .bool(true)]))
            ]
            let (k, v) = bad.randomElement(using: &r)!
            o[k] = v
        }
        return .object(o)
    }

    // MARK: reference validator (naive, independent of the implementation)

    func refValid(_ s: JSONValue, _ v: JSONValue) -> Bool {
        guard case .object(let o) = s else { return false }
        func num(_ x: JSONValue) -> Double? { x.doubleValue }
        if case .string(let t)? = o["type"] {
            let ok: Bool
            switch (t, v) {
            case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object),
                ("number", .int), ("number", .double), ("integer", .int):
                ok = true
            case ("integer", .double(let d)): ok = d.truncatingRemainder(dividingBy: 1) == 0
            default: ok = false
            }
            if !ok { return false }
        }
        if case .array(let values)? = o["enum"] {
            let ok = values.contains { e in
                switch (e, v) {
                case (.string(let a), .string(let b)): return Array(a.unicodeScalars) == Array(b.unicodeScalars)
                default:
                    if let a = num(e), let b = num(v) { return a == b }
                    return e == v
                }
            }
            if !ok { return false }
        }
        switch v {
        case .string(let str):
            let n = str.unicodeScalars.count
            if let m = o["minLength"]?.intValue, n < m { return false }
            if let m = o["maxLength"]?.intValue, n > m { return false }
        case .int, .double:
            let d = num(v)!
            if let m = o["minimum"].flatMap(num), d < m { return false }
            if let m = o["maximum"].flatMap(num), d > m { return false }
        case .array(let a):
            if let m = o["minItems"]?.intValue, a.count < m { return false }
            if let m = o["maxItems"]?.intValue, a.count > m { return false }
            if let items = o["items"], !a.allSatisfy({ refValid(items, $0) }) { return false }
        case .object(let obj):
            // Names compare by exact code points (no Unicode normalisation).
            func same(_ a: String, _ b: String) -> Bool { Array(a.unicodeScalars) == Array(b.unicodeScalars) }
            for case .string(let name) in o["required"]?.arrayValue ?? [] where !obj.keys.contains(where: { same($0, name) }) { return false }
            let props = o["properties"]?.objectValue ?? [:]
            for (k, x) in obj {
                if let p = props.first(where: { same($0.key, k) })?.value {
                    if !refValid(p, x) { return false }
                } else if o["additionalProperties"] == .bool(false) {
                    return false
                }
            }
        default: break
        }
        return true
    }

    /// Resolves an RFC 6901 pointer (nil when it names nothing).
    func resolve(_ pointer: String, in doc: JSONValue) -> JSONValue? {
        if pointer.isEmpty { return doc }
        guard pointer.hasPrefix("/") else { return nil }
        var cur = doc
        for raw in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            let token = raw.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
            switch cur {
            case .object(let o): guard let next = o[token] else { return nil }; cur = next
            case .array(let a): guard let i = Int(token), a.indices.contains(i) else { return nil }; cur = a[i]
            default: return nil
            }
        }
        return cur
    }

    func testRandomSchemasAndStatesAgreeWithReference() {
        var r = SplitMix64(seed: 0x5EED_0001)
        var compiled = 0, violations = 0
        for _ in 0..<3000 {
            let sj = schema(&r, depth: 1, broken: true)
            let s: StateSchema
            do { s = try StateSchema.compile(sj) } catch let e as DomainError {
                XCTAssertEqual(e.code, "INVALID_STATE_SCHEMA")
                guard case .string(let p)? = e.details["pointer"] else { XCTFail("no pointer"); continue }
                XCTAssertNotNil(resolve(p, in: sj), "schema pointer \(p) resolves in \(sj.jsonString)")
                continue
            } catch { XCTFail("\(error)"); continue }
            compiled += 1
            for _ in 0..<6 {
                let v = value(&r, depth: 0)
                let found = s.validate(v)
                XCTAssertEqual(found == nil, refValid(sj, v), "schema \(sj.jsonString) state \(v.jsonString) → \(String(describing: found))")
                if let found {
                    violations += 1
                    XCTAssertEqual(s.validate(v), found, "deterministic")
                    XCTAssertNotNil(resolve(found.pointer, in: v), "state pointer \(found.pointer) resolves in \(v.jsonString)")
                }
            }
        }
        XCTAssertGreaterThan(compiled, 2000)
        XCTAssertGreaterThan(violations, 1000)
    }

    func testArbitraryDocumentsAsSchemasNeverCrash() {
        var r = SplitMix64(seed: 0x5EED_0002)
        for _ in 0..<3000 {
            let doc = value(&r, depth: 0)
            if let s = try? StateSchema.compile(doc) { _ = s.validate(value(&r, depth: 0)) }
            let shapeOK = (try? StateSchema.checkStateShape(doc)) != nil
            XCTAssertEqual(shapeOK, doc.objectValue != nil && doc.depth <= 12)
        }
    }
}
