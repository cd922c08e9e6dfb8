import Foundation
import JSON
import LiveRelayCore
import XCTest

/// Parses JSON text in tests (fails the test on a syntax error).
func sjson(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> JSONValue {
    do { return try JSONValue.parse(text) } catch {
        XCTFail("bad test JSON: \(error)", file: file, line: line)
        return .null
    }
}

/// The `DomainError` thrown by `body`, or nil (failing the test when something else is thrown).
func schemaDomainError(_ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) -> DomainError? {
    do { try body() } catch let e as DomainError { return e } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
    }
    return nil
}

final class StateSchemaCompileTests: XCTestCase {
    private func schemaError(_ schema: JSONValue, file: StaticString = #filePath, line: UInt = #line) -> DomainError? {
        let e = schemaDomainError({ _ = try StateSchema.compile(schema) }, file: file, line: line)
        if let e {
            XCTAssertEqual(e.status, 400, file: file, line: line)
            XCTAssertEqual(e.code, "INVALID_STATE_SCHEMA", file: file, line: line)
        } else {
            XCTFail("schema compiled but should not: \(schema.jsonString)", file: file, line: line)
        }
        return e
    }

    private func assertRejected(_ text: String, pointer: String, file: StaticString = #filePath, line: UInt = #line) {
        let e = schemaError(sjson(text), file: file, line: line)
        XCTAssertEqual(e?.details["pointer"], .string(pointer), file: file, line: line)
    }

    func testAllowedKeywordsCompile() throws {
        let s = try StateSchema.compile(
            sjson(
                """
                {"type":"object","required":["eta"],"additionalProperties":false,
                 "properties":{"eta":{"type":"string","minLength":1,"maxLength":40},
                               "n":{"type":"integer","minimum":0,"maximum":10.5},
                               "st":{"enum":["a",1,2.5,true,null]},
                               "list":{"type":"array","minItems":0,"maxItems":3,"items":{"type":"number"}}}}
                """))
        XCTAssertEqual(s.nodeCount, 6)
        XCTAssertNoThrow(try StateSchema.compile(sjson("{}")))
        XCTAssertNoThrow(try StateSchema.compile(sjson(#"{"minLength": 2.0}"#)), "2.0 is an integer")
    }

    func testRefusedKeywordsWithPointer() {
        let values: [String: String] = [
            "$ref": ##""#/x""##, "pattern": #""^a$""#, "allOf": "[{}]", "anyOf": "[{}]",
            "oneOf": "[{}]", "not": "{}", "default": #""x""#, "format": #""date-time""#,
            "const": "1", "title": #""t""#, "exclusiveMinimum": "1"
        ]
        for (kw, v) in values {
            let schema = sjson(#"{"type":"object","properties":{"eta":{"type":"string",\#(JSONValue.string(kw).jsonString):\#(v)}}}"#)
            let e = schemaError(schema)
            XCTAssertEqual(e?.details["pointer"], .string("/properties/eta/\(kw)"), kw)
            XCTAssertTrue(e?.message.contains("\"\(kw)\"") ?? false, "message names \(kw): \(e?.message ?? "")")
        }
    }

    func testPointerEscapesTildeAndSlash() {
        assertRejected(#"{"properties":{"a/b":{"pattern":"x"}}}"#, pointer: "/properties/a~1b/pattern")
        assertRejected(#"{"properties":{"m~n":{"pattern":"x"}}}"#, pointer: "/properties/m~0n/pattern")
        assertRejected(#"{"properties":{"~/":{"x/y":1}}}"#, pointer: "/properties/~0~1/x~1y")
    }

    func testKeywordShapes() {
        assertRejected(#"{"type":["string","null"]}"#, pointer: "/type")
        assertRejected(#"{"type":"float"}"#, pointer: "/type")
        assertRejected(#"{"type":1}"#, pointer: "/type")
        assertRejected("[]", pointer: "")
        assertRejected("true", pointer: "")
        assertRejected(#"{"properties":{"a":true}}"#, pointer: "/properties/a")
        assertRejected(#"{"properties":[]}"#, pointer: "/properties")
        assertRejected(#"{"additionalProperties":{}}"#, pointer: "/additionalProperties")
        assertRejected(#"{"items":[{}]}"#, pointer: "/items")
        assertRejected(#"{"items":{"pattern":"x"}}"#, pointer: "/items/pattern")
        assertRejected(#"{"enum":[{"a":1}]}"#, pointer: "/enum/0")
        assertRejected(#"{"enum":[1,[2]]}"#, pointer: "/enum/1")
        assertRejected(#"{"enum":[]}"#, pointer: "/enum")
        assertRejected(#"{"enum":"a"}"#, pointer: "/enum")
        assertRejected(#"{"required":["a","a"]}"#, pointer: "/required/1")
        assertRejected(#"{"required":[1]}"#, pointer: "/required/0")
        assertRejected(#"{"required":"a"}"#, pointer: "/required")
        for kw in ["minItems", "maxItems", "minLength", "maxLength"] {
            assertRejected(#"{"\#(kw)":-1}"#, pointer: "/\(kw)")
            assertRejected(#"{"\#(kw)":1.5}"#, pointer: "/\(kw)")
            assertRejected(#"{"\#(kw)":"3"}"#, pointer: "/\(kw)")
        }
        assertRejected(#"{"minimum":"1"}"#, pointer: "/minimum")
        assertRejected(#"{"maximum":null}"#, pointer: "/maximum")
        // Keywords are examined in sorted order: "$ref" before "type".
        assertRejected(##"{"type":"x","$ref":"#"}"##, pointer: "/$ref")
    }

    /// A chain of nested schemas `depth` deep, alternating `properties` and `items`.
    private func chain(_ depth: Int) -> JSONValue {
        var s = JSONValue.object(["type": .string("string")])
        if depth < 2 { return s }
        for level in 2...depth {
            s = level % 2 == 0 ? .object(["properties": .object(["a": s])]) : .object(["items": s])
        }
        return s
    }

    func testDepthLimit() throws {
        XCTAssertNoThrow(try StateSchema.compile(chain(12)))
        let e = schemaError(chain(13))
        XCTAssertEqual(e?.details["limit"], .int(12))
        XCTAssertEqual(e?.details["actual"], .int(13))
        // Root depth 1 → the 13th node is 12 steps down; chain(13) starts with "items" at the root.
        XCTAssertEqual(
            e?.details["pointer"],
            .string("/items/properties/a/items/properties/a/items/properties/a/items/properties/a/items/properties/a/items/properties/a"))
        XCTAssertEqual(schemaError(chain(20))?.details["actual"], .int(20))
    }

    /// Root with two children holding `a` and `b` members (names sort in creation order).
    private func wide(_ a: Int, _ b: Int) -> JSONValue {
        func props(_ n: Int) -> JSONValue {
            .object(Dictionary(uniqueKeysWithValues: (0..<n).map { (String(format: "p%03d", $0), JSONValue.object([:])) }))
        }
        return .object(["properties": .object(["a": .object(["properties": props(a)]), "b": .object(["properties": props(b)])])])
    }

    func testNodeLimit() throws {
        let ok = try StateSchema.compile(wide(127, 126))
        XCTAssertEqual(ok.nodeCount, 256)
        let e = schemaError(wide(127, 127))
        XCTAssertEqual(e?.details["limit"], .int(256))
        XCTAssertEqual(e?.details["actual"], .int(257))
        XCTAssertEqual(e?.details["pointer"], .string("/properties/b/properties/p126"))
        XCTAssertEqual(schemaError(wide(128, 128))?.details["actual"], .int(259))
    }

    func testPropertiesLimit() throws {
        func schema(_ n: Int) -> JSONValue {
            .object(["properties": .object(Dictionary(uniqueKeysWithValues: (0..<n).map { ("k\($0)", JSONValue.object([:])) }))])
        }
        XCTAssertNoThrow(try StateSchema.compile(schema(128)))
        let e = schemaError(schema(129))
        XCTAssertEqual(e?.details["pointer"], .string("/properties"))
        XCTAssertEqual(e?.details["limit"], .int(128))
        XCTAssertEqual(e?.details["actual"], .int(129))
    }

    func testEnumLimit() throws {
        func schema(_ n: Int) -> JSONValue {
            .object(["properties": .object(["s": .object(["enum": .array((0..<n).map { .int(Int64($0)) })])])])
        }
        XCTAssertNoThrow(try StateSchema.compile(schema(128)))
        let e = schemaError(schema(129))
        XCTAssertEqual(e?.details["pointer"], .string("/properties/s/enum"))
        XCTAssertEqual(e?.details["limit"], .int(128))
        XCTAssertEqual(e?.details["actual"], .int(129))
    }
}
