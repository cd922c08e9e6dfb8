import JSON
@testable import LiveRelayCore
import XCTest

final class PrepareManifestTests: XCTestCase {
    static let digest = String(repeating: "ab", count: 32)

    /// A valid prepare body; `edit` changes it before parsing.
    func body(_ edit: (inout [String: JSONValue]) -> Void = { _ in }) -> JSONValue {
        var o: [String: JSONValue] = [
            "binding_id": .string("bnd_01J9Z"),
            "activity_type": .string("delivery"),
            "attributes_type": .string("DeliveryAttributes"),
            "renderer_digest": .string("sha256:renderer-1"),
            "schema": sjson(
                #"{"type":"object","required":["eta"],"properties":{"eta":{"type":"string","maxLength":5},"stops":{"type":"array","items":{"type":"integer"}}}}"#
            ),
            "resources": .array([.object(["path": .string("img/logo.png"), "sha256": .string(Self.digest), "bytes": .int(1234)])]),
            "bundle": .object(["bytes": .int(1000), "modules": .int(3), "files": .int(10)]),
            "sample_state": sjson(#"{"eta":"12:30","stops":[1,2]}"#)
        ]
        edit(&o)
        return .object(o)
    }

    func bundle(_ key: String, _ v: JSONValue) -> (inout [String: JSONValue]) -> Void {
        { o in
            var b = o["bundle"]!.objectValue!
            b[key] = v
            o["bundle"] = .object(b)
        }
    }

    func resources(_ list: [JSONValue]) -> (inout [String: JSONValue]) -> Void { { $0["resources"] = .array(list) } }

    func resource(_ path: String, bytes: Int64 = 1) -> JSONValue {
        .object(["path": .string(path), "sha256": .string(Self.digest), "bytes": .int(bytes)])
    }

    func assertInvalid(
        _ b: JSONValue, field: String, limit: Int? = nil, actual: Int? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let e = schemaDomainError({ _ = try PrepareManifest.parse(b) }, file: file, line: line)
        XCTAssertEqual(e?.status, 400, file: file, line: line)
        XCTAssertEqual(e?.code, "INVALID_REQUEST", e?.message ?? "no error", file: file, line: line)
        XCTAssertEqual(e?.details["field"], .string(field), e?.message ?? "", file: file, line: line)
        if let limit { XCTAssertEqual(e?.details["limit"], .int(Int64(limit)), file: file, line: line) }
        if let actual { XCTAssertEqual(e?.details["actual"], .int(Int64(actual)), file: file, line: line) }
    }

    func assertParses(_ b: JSONValue, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNoThrow(try PrepareManifest.parse(b), file: file, line: line)
    }

    func testValidBodyExposesFields() throws {
        let m = try PrepareManifest.parse(body())
        XCTAssertEqual(m.bindingId, "bnd_01J9Z")
        XCTAssertEqual(m.activityType, "delivery")
        XCTAssertEqual(m.attributesType, "DeliveryAttributes")
        XCTAssertEqual(m.rendererDigest, "sha256:renderer-1")
        XCTAssertNotNil(m.schema)
        XCTAssertEqual(m.schemaJSON, body().objectValue!["schema"])
        XCTAssertEqual(m.resources, [PrepareManifest.Resource(path: "img/logo.png", sha256: Self.digest, bytes: 1234)])
        XCTAssertEqual([m.bundleBytes, m.bundleModules, m.bundleFiles], [1000, 3, 10])
        XCTAssertEqual(m.sampleState, sjson(#"{"eta":"12:30","stops":[1,2]}"#))
        XCTAssertNil(m.idempotencyKey)
        XCTAssertNil(m.startManifest["sample_state"])
        XCTAssertNil(m.startManifest["resources"])
        XCTAssertEqual(m.startManifestBytes, m.startManifest.serialized().count)

        let minimal = try PrepareManifest.parse(
            body { o in
                o["schema"] = nil; o["resources"] = nil; o["sample_state"] = .null; o["idempotency_key"] = .string("k-1")
            })
        XCTAssertNil(minimal.schema)
        XCTAssertNil(minimal.schemaJSON)
        XCTAssertEqual(minimal.resources, [])
        XCTAssertNil(minimal.sampleState)
        XCTAssertEqual(minimal.idempotencyKey, "k-1")
    }

    func testBundleLimits() {
        assertParses(body(bundle("bytes", .int(16_777_216))))
        assertInvalid(body(bundle("bytes", .int(16_777_217))), field: "bundle.bytes", limit: 16_777_216, actual: 16_777_217)
        assertParses(body(bundle("modules", .int(256))))
        assertInvalid(body(bundle("modules", .int(257))), field: "bundle.modules", limit: 256, actual: 257)
        assertParses(body(bundle("files", .int(512))))
        assertInvalid(body(bundle("files", .int(513))), field: "bundle.files", limit: 512, actual: 513)
        assertParses(body(bundle("files", .int(0))))
        assertParses(body(bundle("files", .double(2.0))))
        assertInvalid(body(bundle("files", .int(-1))), field: "bundle.files")
        assertInvalid(body(bundle("files", .double(1.5))), field: "bundle.files")
        assertInvalid(body(bundle("files", .string("1"))), field: "bundle.files")
        assertInvalid(body(bundle("files", .null)), field: "bundle.files")
        assertInvalid(body(bundle("extra", .int(1))), field: "bundle.extra")
        assertInvalid(body { $0["bundle"] = nil }, field: "bundle")
        assertInvalid(body { $0["bundle"] = .array([]) }, field: "bundle")
    }

    func testResourceCountLimit() {
        let ok = (0..<254).map { resource("r/\($0)") }
        assertParses(body(resources(ok)))
        assertInvalid(body(resources(ok + [resource("r/254")])), field: "resources", limit: 254, actual: 255)
        assertInvalid(body { $0["resources"] = .object([:]) }, field: "resources")
    }

    func testResourcePaths() {
        let p256 = String(repeating: "a", count: 251) + "/é.x"  // "é" is 2 bytes of UTF-8
        XCTAssertEqual(p256.utf8.count, 256)
        let exactly255 = String(repeating: "a", count: 250) + "/é.x"
        XCTAssertEqual(exactly255.utf8.count, 255)
        assertParses(body(resources([resource(exactly255)])))
        assertInvalid(body(resources([resource(exactly255), resource(p256)])), field: "resources.1.path", limit: 255, actual: 256)

        for good in ["a", "a/b/c.png", "fonts/SF Pro.ttf", "a..b", "..a", "a/.hidden", "é/😀"] {
            assertParses(body(resources([resource(good)])))
        }
        // "./a", "a//b" and "a/" are refused: paths must be normalised so one file has one spelling.
        for bad in ["../x", "a/../b", "..", "a/..", "/etc/passwd", "a\\b", "..\\x", "", "./a", "a/./b", ".", "a//b", "a/", "a\u{0}b", "a\nb"] {
            assertInvalid(body(resources([resource("ok"), resource(bad)])), field: "resources.1.path")
        }
        assertInvalid(body(resources([resource("x/y"), resource("x/y")])), field: "resources.1.path")
    }

    func testResourceFields() {
        let base: [String: JSONValue] = ["path": .string("a"), "sha256": .string(Self.digest), "bytes": .int(0)]
        func with(_ k: String, _ v: JSONValue?) -> JSONValue { var r = base; r[k] = v; return .object(r) }
        assertParses(body(resources([.object(base)])))
        assertInvalid(body(resources([with("extra", .int(1))])), field: "resources.0.extra")
        assertInvalid(body(resources([.object(base), with("x", .null)])), field: "resources.1.x")
        assertInvalid(body(resources([with("sha256", .string(Self.digest.uppercased()))])), field: "resources.0.sha256")
        assertInvalid(body(resources([with("sha256", .string(String(Self.digest.dropLast())))])), field: "resources.0.sha256")
        assertInvalid(body(resources([with("sha256", .string(Self.digest + "0"))])), field: "resources.0.sha256")
        assertInvalid(body(resources([with("sha256", nil)])), field: "resources.0.sha256")
        assertInvalid(body(resources([with("bytes", .int(-1))])), field: "resources.0.bytes")
        assertInvalid(body(resources([with("path", .int(1))])), field: "resources.0.path")
        assertInvalid(body(resources([with("path", nil)])), field: "resources.0.path")
        assertInvalid(body(resources([.string("a")])), field: "resources.0")
    }

    func testUnknownAndMissingFields() {
        assertInvalid(body { $0["extra"] = .int(1) }, field: "extra")
        assertInvalid(body { $0["bindingId"] = .string("x") }, field: "bindingId")
        for f in ["binding_id", "activity_type", "attributes_type", "renderer_digest"] {
            assertInvalid(body { $0[f] = nil }, field: f)
            assertInvalid(body { $0[f] = .string("") }, field: f)
            assertInvalid(body { $0[f] = .int(1) }, field: f)
        }
        for f in ["activity_type", "attributes_type", "renderer_digest"] {
            assertParses(body { $0[f] = .string(String(repeating: "😀", count: 128)) })
            assertInvalid(body { $0[f] = .string(String(repeating: "x", count: 129)) }, field: f, limit: 128, actual: 129)
        }
        assertInvalid(body { $0["idempotency_key"] = .string("") }, field: "idempotency_key")
        assertInvalid(body { $0["idempotency_key"] = .string("a\tb") }, field: "idempotency_key")
        assertInvalid(.array([]), field: "body")
    }

    func testSampleState() {
        let mismatch = schemaDomainError {
            _ = try PrepareManifest.parse(self.body { $0["sample_state"] = sjson(#"{"eta":"12:30","stops":[1,"2"]}"#) })
        }
        XCTAssertEqual(mismatch?.status, 422)
        XCTAssertEqual(mismatch?.code, "STATE_SCHEMA_MISMATCH")
        XCTAssertEqual(mismatch?.details["pointer"], .string("/stops/1"))
        let missing = schemaDomainError { _ = try PrepareManifest.parse(self.body { $0["sample_state"] = .object([:]) }) }
        XCTAssertEqual(missing?.details["pointer"], .string(""))
        assertInvalid(body { $0["sample_state"] = .array([]) }, field: "sample_state")
        // Without a schema: the shape rule only (object, depth ≤ 12).
        var deep = JSONValue.object([:])
        for _ in 1..<12 { deep = .object(["k": deep]) }
        assertParses(
            body {
                $0["schema"] = nil; $0["sample_state"] = deep
            })
        assertInvalid(
            body {
                $0["schema"] = nil; $0["sample_state"] = .object(["k": deep])
            }, field: "sample_state", limit: 12, actual: 13)
        assertInvalid(
            body {
                $0["schema"] = nil; $0["sample_state"] = .string("x")
            }, field: "sample_state")
    }

    func testSchemaErrors() {
        let e = schemaDomainError { _ = try PrepareManifest.parse(self.body { $0["schema"] = sjson(#"{"properties":{"eta":{"pattern":"x"}}}"#) }) }
        XCTAssertEqual(e?.code, "INVALID_STATE_SCHEMA")
        XCTAssertEqual(e?.details["pointer"], .string("/properties/eta/pattern"))
        let s = schemaDomainError { _ = try PrepareManifest.parse(self.body { $0["schema"] = .string("x") }) }
        XCTAssertEqual(s?.code, "INVALID_STATE_SCHEMA")
        XCTAssertEqual(s?.details["pointer"], .string(""))
    }

    /// The start manifest's size, computed independently: the body minus sample_state and resources.
    func manifestBytes(_ b: JSONValue) -> Int {
        var o = b.objectValue!
        o["sample_state"] = nil
        o["resources"] = nil
        return JSONValue.object(o).serialized().count
    }

    func testStartManifestLimit() throws {
        func padded(_ n: Int) -> JSONValue {
            body { $0["schema"] = .object(["properties": .object([String(repeating: "p", count: n): .object([:])])]) }
        }
        let base = manifestBytes(padded(0))
        let at8192 = padded(8192 - base)
        XCTAssertEqual(manifestBytes(at8192), 8192)
        let m = try PrepareManifest.parse(at8192)
        XCTAssertEqual(m.startManifestBytes, 8192)
        let over = padded(8193 - base)
        XCTAssertEqual(manifestBytes(over), 8193)
        assertInvalid(over, field: "schema", limit: 8192, actual: 8193)
        // Resources and sample_state do not count.
        let many = (0..<200).map { resource("some/long/resource/path/\($0).png") }
        assertParses(
            body { o in
                o["schema"] = at8192.objectValue!["schema"]
                o["resources"] = .array(many)
            })
    }

    /// docs/limits.md: the prepare limits and the state and schema limits a prepare checks.
    func testLimitConstants() {
        XCTAssertEqual(StateLimits.maxDepth, 12)
        XCTAssertEqual(StateLimits.maxSchemaDepth, 12)
        XCTAssertEqual(StateLimits.maxSchemaNodes, 256)
        XCTAssertEqual(StateLimits.maxSchemaProperties, 128)
        XCTAssertEqual(StateLimits.maxSchemaEnumValues, 128)
        XCTAssertEqual(PrepareLimits.maxBundleBytes, 16_777_216)
        XCTAssertEqual(PrepareLimits.maxBundleModules, 256)
        XCTAssertEqual(PrepareLimits.maxBundleFiles, 512)
        XCTAssertEqual(PrepareLimits.maxResources, 254)
        XCTAssertEqual(PrepareLimits.maxResourcePathBytes, 255)
        XCTAssertEqual(PrepareLimits.maxStartManifestBytes, 8192)
    }
}
