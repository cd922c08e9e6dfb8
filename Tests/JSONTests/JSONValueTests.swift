import XCTest
import LiveRelayTestSupport
@testable import JSON

/// RFC 8259 strictness and canonical serialization of the JSON module.
final class JSONValueTests: XCTestCase {
    func testParsesScalarsAndNumbers() throws {
        XCTAssertEqual(try JSONValue.parse("1"), .int(1))
        XCTAssertEqual(try JSONValue.parse("-0"), .int(0))
        XCTAssertEqual(try JSONValue.parse("1.0"), .double(1.0))
        XCTAssertEqual(try JSONValue.parse("1e3"), .double(1000))
        XCTAssertEqual(try JSONValue.parse("9223372036854775807"), .int(Int64.max))
        XCTAssertEqual(try JSONValue.parse("9223372036854775808"), .double(9223372036854775808))
        XCTAssertEqual(try JSONValue.parse(" true "), .bool(true))
        XCTAssertEqual(try JSONValue.parse("null"), .null)
        XCTAssertEqual(try JSONValue.parse("\"\\ud83d\\ude00\\u00e9\\n\""), .string("😀é\n"))
    }

    func testRejectsWhatRFC8259Rejects() {
        for bad in [
            "[1,]", "{\"a\":1,}", "{\"a\":1,\"a\":2}", "01", "1.", ".5", "+1", "\"\\x\"", "\"a\nb\"",
            "[1] x", "", "{a:1}", "'a'", "\"\\ud800\"", "NaN", "tru", "[", "{\"a\"}", "1e999"
        ] {
            XCTAssertThrowsError(try JSONValue.parse(bad), "accepted \(bad.debugDescription)")
        }
        XCTAssertThrowsError(try JSONValue.parse([0x22, 0xFF, 0x22]), "invalid UTF-8 accepted")
    }

    func testDepthLimitAtBoundary() throws {
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        XCTAssertEqual(try JSONValue.parse(ok).depth, 64)
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        XCTAssertThrowsError(try JSONValue.parse(deep))
        let hostile = String(repeating: "[", count: 100_000)
        XCTAssertThrowsError(try JSONValue.parse(hostile))
    }

    func testSerializationIsCanonical() throws {
        let v = try JSONValue.parse("{\"b\":[1,2.5,\"x/y\"],\"a\":{\"é\":null,\"A\":true},\"c\":\"q\\\"\\\\\\u0001\"}")
        XCTAssertEqual(v.jsonString, "{\"a\":{\"A\":true,\"é\":null},\"b\":[1,2.5,\"x/y\"],\"c\":\"q\\\"\\\\\\u0001\"}")
        XCTAssertEqual(try JSONValue.parse(v.jsonString), v)
        XCTAssertEqual(JSONValue.double(3).jsonString, "3")
        XCTAssertEqual(JSONValue.string("😀").serialized().count, 6)
    }

    /// Integers and booleans are written without an intermediate `String` (`writeInt`): the
    /// text must still be exactly `String(v)`'s, at every boundary of the digit loop.
    func testIntegersAndBooleansWriteWhatStringWrites() {
        var values: [Int64] = [0, 1, 9, 10, 11, 99, 100, -1, -9, -10, -100, .max, .min, .max - 1, .min + 1]
        for p in 1...18 {
            let ten = Int64(pow(10.0, Double(p)))
            values += [ten - 1, ten, ten + 1, -(ten - 1), -ten, -(ten + 1)]
        }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<1000 { values.append(Int64.random(in: .min ... .max, using: &rng)) }
        for v in values { XCTAssertEqual(JSONValue.int(v).jsonString, String(v), "\(v)") }
        XCTAssertEqual(JSONValue.array([.bool(true), .bool(false), .null]).jsonString, "[true,false,null]")
    }

    func testKeysSortByTheirUTF8BytesAndStringsEscapeEveryControlCharacter() throws {
        // Keys: prefixes, the empty key, multi-byte UTF-8 above ASCII, and one made through
        // NSString (bridged where Foundation bridges; native on Linux).
        let keys = ["", "a", "ab", "aB", "b", "z", "é", "éa", "😀", "\u{7F}", "A", String(NSString(string: "ä"))]
        for a in keys {
            for b in keys {
                XCTAssertEqual(
                    JSONValue.utf8Precedes(a, b), a.utf8.lexicographicallyPrecedes(b.utf8), "\(a.debugDescription) < \(b.debugDescription)")
            }
        }
        var o: [String: JSONValue] = [:]
        for (n, k) in keys.enumerated() { o[k] = .int(Int64(n)) }
        let expected = keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            .map { "\"\($0)\":\(keys.firstIndex(of: $0)!)" }.joined(separator: ",")
        XCTAssertEqual(JSONValue.object(o).jsonString, "{" + expected + "}")
        // Every control character, quote and backslash, at the start, middle and end of runs.
        let specials: [UInt8: String] = [0x22: "\\\"", 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0C: "\\f"]
        for c in [UInt8](0..<0x20) + [0x22, 0x5C] {
            let ch = String(UnicodeScalar(c))
            let escaped = specials[c] ?? String(format: "\\u%04x", c)
            XCTAssertEqual(JSONValue.string(ch + "ab" + ch + "é" + ch).jsonString, "\"" + escaped + "ab" + escaped + "é" + escaped + "\"")
        }
        XCTAssertEqual(JSONValue.string("").jsonString, "\"\"")
        XCTAssertEqual(JSONValue.string("plain 😀 / text").jsonString, "\"plain 😀 / text\"")
    }

    func testRandomDocumentsRoundTrip() throws {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<2000 {
            let v = randomValue(&rng, depth: 0)
            XCTAssertEqual(try JSONValue.parse(v.serialized()), v)
        }
    }

    private func randomValue(_ r: inout SplitMix64, depth: Int) -> JSONValue {
        switch r.next() % (depth > 4 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(r.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: r.next()) >> Int64(r.next() % 60))
        case 3: return .double(Double(Int64(bitPattern: r.next()) >> 20) / 1024.5)
        case 4:
            return .string(String((0..<(r.next() % 8)).map { _ in ["a", "é", "😀", "\"", "\\", "\n", "\u{1}", "/"][Int(r.next() % 8)] as Character }))
        case 5: return .array((0..<(r.next() % 4)).map { _ in randomValue(&r, depth: depth + 1) })
        default:
            var o: [String: JSONValue] = [:]
            for n in 0..<(r.next() % 4) { o["k\(n)\(r.next() % 3)"] = randomValue(&r, depth: depth + 1) }
            return .object(o)
        }
    }
}
