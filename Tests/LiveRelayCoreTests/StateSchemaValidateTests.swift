import JSON
import LiveRelayCore
import XCTest

final class StateSchemaValidateTests: XCTestCase {
    private func schema(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> StateSchema {
        do { return try StateSchema.compile(sjson(text, file: file, line: line)) } catch {
            XCTFail("schema did not compile: \(error)", file: file, line: line)
            return try! StateSchema.compile(.object([:]))
        }
    }

    private func assertValid(_ s: StateSchema, _ state: JSONValue, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNil(s.validate(state), state.jsonString, file: file, line: line)
    }

    private func assertViolation(
        _ s: StateSchema, _ state: JSONValue, pointer: String, keyword: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let v = s.validate(state)
        XCTAssertEqual(v?.pointer, pointer, state.jsonString, file: file, line: line)
        XCTAssertEqual(v?.keyword, keyword, state.jsonString, file: file, line: line)
    }

    func testTypes() {
        let cases: [(String, [JSONValue], [JSONValue])] = [
            ("null", [.null], [.bool(false), .int(0), .string("")]),
            ("boolean", [.bool(true)], [.null, .int(1), .string("true")]),
            ("number", [.int(1), .double(1.5), .double(-0.0)], [.string("1"), .null]),
            ("integer", [.int(1), .double(1.0), .double(-3.0), .double(1e300)], [.double(1.5), .string("1"), .bool(true)]),
            ("string", [.string(""), .string("x")], [.int(1), .null]),
            ("array", [.array([])], [.object([:]), .string("[]")]),
            ("object", [.object([:])], [.array([]), .null])
        ]
        for (type, good, bad) in cases {
            let s = schema(#"{"type":"\#(type)"}"#)
            for v in good { assertValid(s, v) }
            for v in bad { assertViolation(s, v, pointer: "", keyword: "type") }
        }
    }

    func testKeywordsApplyOnlyToTheirKind() {
        let s = schema(
            #"{"minLength":3,"maxLength":4,"minimum":5,"maximum":6,"minItems":2,"maxItems":2,"items":{"type":"string"},"required":["x"],"properties":{"a":{"type":"string"},"x":{}},"additionalProperties":false}"#
        )
        assertValid(s, .int(5))  // string/array/object keywords ignored on numbers
        assertValid(s, .double(5.5))
        assertValid(s, .string("abc"))  // numeric keywords ignored on strings
        assertValid(s, .array([.string("a"), .string("b")]))
        assertValid(s, sjson(#"{"x":1000,"a":"s"}"#))  // numeric keywords ignored on objects
        assertValid(s, .null)
        assertValid(s, .bool(true))
        assertViolation(s, .int(1), pointer: "", keyword: "minimum")
        assertViolation(s, .string("ab"), pointer: "", keyword: "minLength")
        assertViolation(s, .array([.string("a")]), pointer: "", keyword: "minItems")
        assertViolation(s, .array([.string("a"), .int(1)]), pointer: "/1", keyword: "type")
        assertViolation(s, .object([:]), pointer: "", keyword: "required")
        assertViolation(s, sjson(#"{"x":1,"y":2}"#), pointer: "/y", keyword: "additionalProperties")
        assertViolation(s, sjson(#"{"x":1,"a":2}"#), pointer: "/a", keyword: "type")
    }

    func testCodePointLengths() {
        let max1 = schema(#"{"maxLength":1}"#)
        let min2 = schema(#"{"minLength":2}"#)
        for s in ["\u{E9}", "😀", "a", "\u{10FFFF}"] {
            assertValid(max1, .string(s))
            assertViolation(min2, .string(s), pointer: "", keyword: "minLength")
        }
        // Decomposed "é" is two code points (no normalisation); a flag is two code points.
        assertViolation(max1, .string("e\u{301}"), pointer: "", keyword: "maxLength")
        assertValid(min2, .string("🇫🇷"))
        assertViolation(max1, .string("🇫🇷"), pointer: "", keyword: "maxLength")
        let exact = schema(#"{"minLength":4,"maxLength":4}"#)
        assertValid(exact, .string("😀😀😀😀"))
        assertViolation(exact, .string("😀😀😀"), pointer: "", keyword: "minLength")
        assertViolation(exact, .string("😀😀😀😀😀"), pointer: "", keyword: "maxLength")
        assertValid(schema(#"{"maxLength":0}"#), .string(""))
    }

    func testNumbers() {
        let s = schema(#"{"type":"integer","minimum":0,"maximum":10}"#)
        assertValid(s, .int(0)); assertValid(s, .int(10)); assertValid(s, .double(10.0))
        assertViolation(s, .double(1.5), pointer: "", keyword: "type")
        assertViolation(s, .int(-1), pointer: "", keyword: "minimum")
        assertViolation(s, .double(11), pointer: "", keyword: "maximum")
        let f = schema(#"{"minimum":0.5,"maximum":1.5}"#)
        assertValid(f, .int(1)); assertValid(f, .double(0.5)); assertValid(f, .double(1.5))
        assertViolation(f, .int(0), pointer: "", keyword: "minimum")
        assertViolation(f, .int(2), pointer: "", keyword: "maximum")
        // Exact Int64 / Double comparison beyond 2^53.
        let big = schema(#"{"maximum":9007199254740993}"#)
        assertValid(big, .int(9_007_199_254_740_993))
        assertValid(big, .double(9_007_199_254_740_992))
        assertViolation(big, .int(9_007_199_254_740_994), pointer: "", keyword: "maximum")
        let bigD = schema(#"{"maximum":9007199254740992.0}"#)
        assertViolation(bigD, .int(9_007_199_254_740_993), pointer: "", keyword: "maximum")
        assertValid(schema(#"{"minimum":-1e300}"#), .int(Int64.min))
        assertViolation(schema(#"{"maximum":-1e300}"#), .int(Int64.min), pointer: "", keyword: "maximum")
        assertViolation(schema(#"{"minimum":1e19}"#), .int(Int64.max), pointer: "", keyword: "minimum")
    }

    func testEnumUsesJSONEquality() {
        let s = schema(#"{"enum":[1,"a",null,false,2.5]}"#)
        for v: JSONValue in [.int(1), .double(1.0), .string("a"), .null, .bool(false), .double(2.5)] { assertValid(s, v) }
        for v: JSONValue in [.int(2), .string("A"), .bool(true), .int(0), .array([]), .object([:]), .string("1")] {
            assertViolation(s, v, pointer: "", keyword: "enum")
        }
        assertViolation(schema(#"{"enum":["\u00e9"]}"#), .string("e\u{301}"), pointer: "", keyword: "enum")
        assertViolation(schema(#"{"type":"string","enum":[1]}"#), .int(1), pointer: "", keyword: "type")
    }

    func testObjectsAndPointers() {
        let s = schema(
            #"""
            {"type":"object","required":["inner"],"properties":{
              "inner":{"type":"object","required":["id","eta"],"additionalProperties":false,
                       "properties":{"id":{"type":"string"},"eta":{"type":"string"}}},
              "a/b":{"type":"integer"},"m~n":{"type":"integer"},
              "stops":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"}}}}}}
            """#)
        assertValid(s, sjson(#"{"inner":{"id":"x","eta":"y"},"unknown":[1,2]}"#))
        assertViolation(s, sjson(#"{}"#), pointer: "", keyword: "required")
        assertViolation(s, sjson(#"{"inner":{"id":"x"}}"#), pointer: "/inner", keyword: "required")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y","zz":1}}"#), pointer: "/inner/zz", keyword: "additionalProperties")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y","q/r~":1}}"#), pointer: "/inner/q~1r~0", keyword: "additionalProperties")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y"},"a/b":"s"}"#), pointer: "/a~1b", keyword: "type")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y"},"m~n":1.5}"#), pointer: "/m~0n", keyword: "type")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y"},"stops":[{"name":"a"},{},{"name":3}]}"#), pointer: "/stops/2/name", keyword: "type")
        assertViolation(s, sjson(#"{"inner":{"id":"x","eta":"y"},"stops":{"name":3}}"#), pointer: "/stops", keyword: "type")
    }

    func testPropertyNamesCompareByCodePoints() {
        // Schema names "é" precomposed; a state spelling it decomposed is a different member.
        let s = schema(#"{"properties":{"\u00e9":{"type":"string"}},"additionalProperties":false}"#)
        assertValid(s, .object(["\u{E9}": .string("x")]))
        assertViolation(s, .object(["\u{E9}": .int(1)]), pointer: "/\u{E9}", keyword: "type")
        assertViolation(s, .object(["e\u{301}": .string("x")]), pointer: "/e\u{301}", keyword: "additionalProperties")
        let r = schema(#"{"required":["\u00e9"]}"#)
        assertViolation(r, .object(["e\u{301}": .int(1)]), pointer: "", keyword: "required")
        assertValid(r, .object(["\u{E9}": .int(1)]))
    }

    func testFirstViolationIsDeterministic() {
        let s = schema(
            #"{"properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"é":{"type":"string"},"Z":{"type":"string"}},"additionalProperties":false}"#
        )
        let state = sjson(#"{"c":1,"b":2,"é":3,"a":4,"Z":5,"x":6}"#)
        for _ in 0..<20 { assertViolation(s, state, pointer: "/Z", keyword: "type") }
        assertViolation(s, sjson(#"{"c":1,"é":3,"x":6}"#), pointer: "/c", keyword: "type")
        assertViolation(s, sjson(#"{"é":3,"x":6}"#), pointer: "/x", keyword: "additionalProperties")
        let nested = schema(#"{"properties":{"a":{"properties":{"x":{"type":"string"},"y":{"type":"string"}}},"b":{"type":"string"}}}"#)
        for _ in 0..<20 {
            assertViolation(nested, sjson(#"{"b":1,"a":{"y":2,"x":3}}"#), pointer: "/a/x", keyword: "type")
            assertViolation(nested, sjson(#"{"b":1,"a":{"y":2,"x":"ok"}}"#), pointer: "/a/y", keyword: "type")
        }
    }

    func testCheckThrows422WithPointer() {
        let s = schema(#"{"properties":{"eta":{"type":"string","maxLength":3}}}"#)
        XCTAssertNoThrow(try s.check(sjson(#"{"eta":"abc"}"#)))
        let e = schemaDomainError { try s.check(sjson(#"{"eta":"abcd"}"#)) }
        XCTAssertEqual(e?.status, 422)
        XCTAssertEqual(e?.code, "STATE_SCHEMA_MISMATCH")
        XCTAssertEqual(e?.details, ["pointer": .string("/eta")])
    }

    private func nested(_ depth: Int) -> JSONValue {
        var v = JSONValue.object([:])
        for _ in 1..<depth { v = .object(["k": v]) }
        return v
    }

    func testStateShape() {
        XCTAssertEqual(nested(12).depth, 12)
        XCTAssertNoThrow(try StateSchema.checkStateShape(nested(12)))
        let e = schemaDomainError { try StateSchema.checkStateShape(nested(13)) }
        XCTAssertEqual(e?.status, 400)
        XCTAssertEqual(e?.code, "INVALID_REQUEST")
        XCTAssertEqual(e?.details, ["field": .string("state"), "limit": .int(12), "actual": .int(13)])
        let arrays = sjson("[[[[[[[[[[[[1]]]]]]]]]]]]")
        XCTAssertEqual(arrays.depth, 12)
        XCTAssertNoThrow(try StateSchema.checkStateShape(sjson(#"{"a":[[[[[[[[[[[1]]]]]]]]]]]}"#)))
        XCTAssertNotNil(schemaDomainError { try StateSchema.checkStateShape(.object(["a": arrays])) })
        for bad: JSONValue in [.array([]), .string("x"), .null, .int(1)] {
            let e = schemaDomainError { try StateSchema.checkStateShape(bad, field: "sample_state") }
            XCTAssertEqual(e?.details, ["field": .string("sample_state")])
        }
    }
}
