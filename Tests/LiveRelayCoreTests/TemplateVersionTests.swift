import JSON
@testable import LiveRelayCore
import XCTest

/// A small reference SHA-256 (FIPS 180-4) so the tests need no crypto module.
func tvReferenceSHA256(_ message: [UInt8]) -> [UInt8] {
    let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
    ]
    var h: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
    var m = message
    m.append(0x80)
    while m.count % 64 != 56 { m.append(0) }
    let bits = UInt64(message.count) * 8
    for i in (0..<8).reversed() { m.append(UInt8(truncatingIfNeeded: bits >> (UInt64(i) * 8))) }
    func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }
    var w = [UInt32](repeating: 0, count: 64)
    for chunk in stride(from: 0, to: m.count, by: 64) {
        for t in 0..<16 {
            w[t] = (0..<4).reduce(UInt32(0)) { $0 << 8 | UInt32(m[chunk + t * 4 + $1]) }
        }
        for t in 16..<64 {
            let s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3)
            let s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10)
            w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
        }
        var (a, b, c, d, e, f, g, hh) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
        for t in 0..<64 {
            let t1 = hh &+ (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) &+ ((e & f) ^ (~e & g)) &+ k[t] &+ w[t]
            let t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) &+ ((a & b) ^ (a & c) ^ (b & c))
            (hh, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
        }
        for (i, v) in [a, b, c, d, e, f, g, hh].enumerated() { h[i] = h[i] &+ v }
    }
    return h.flatMap { v in (0..<4).map { UInt8(truncatingIfNeeded: v >> (24 - 8 * UInt32($0))) } }
}

final class TemplateVersionTests: XCTestCase {
    let digest = String(repeating: "0f", count: 32)

    func hex(_ b: [UInt8]) -> String { b.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() }

    func testReferenceSHA256() {
        XCTAssertEqual(hex(tvReferenceSHA256([])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(tvReferenceSHA256(Array("abc".utf8))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(
            hex(tvReferenceSHA256(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    func testBase32RFC4648Vectors() {
        let vectors = ["": "", "f": "my", "fo": "mzxq", "foo": "mzxw6", "foob": "mzxw6yq", "fooba": "mzxw6ytb", "foobar": "mzxw6ytboi"]
        for (input, out) in vectors { XCTAssertEqual(TemplateVersion.base32(Array(input.utf8)), out, input) }
    }

    func derive(
        binding: String = "bnd_1", activity: String = "delivery", attributes: String = "DeliveryAttributes",
        renderer: String = "r1", schema: JSONValue? = nil, resources: [PrepareManifest.Resource] = []
    ) -> String {
        TemplateVersion.derive(
            bindingId: binding, activityType: activity, attributesType: attributes, rendererDigest: renderer,
            schema: schema, resources: resources, sha256: tvReferenceSHA256)
    }

    func testFormat() {
        let id = derive()
        XCTAssertTrue(id.hasPrefix("tv_"))
        XCTAssertEqual(id.count, 55)
        XCTAssertEqual(id.count, TemplateVersion.length)
        XCTAssertTrue(id.dropFirst(3).allSatisfy { "abcdefghijklmnopqrstuvwxyz234567".contains($0) }, id)
    }

    func testSameContentSameId() throws {
        let a = sjson(#"{"type":"object","properties":{"eta":{"type":"string","maxLength":5},"n":{"minimum":1}},"required":["eta"]}"#)
        let b = sjson(#"{"required":["eta"],"properties":{"n":{"minimum":1.0},"eta":{"maxLength":5,"type":"string"}},"type":"object"}"#)
        let r1 = PrepareManifest.Resource(path: "a.png", sha256: digest, bytes: 1)
        let r2 = PrepareManifest.Resource(path: "b/c.png", sha256: digest, bytes: 2)
        XCTAssertEqual(derive(schema: a, resources: [r1, r2]), derive(schema: b, resources: [r2, r1]))
        XCTAssertEqual(derive(schema: nil), derive(schema: .null))
        XCTAssertEqual(derive(), derive())
        // Through the manifest.
        let body = sjson(
            #"{"binding_id":"bnd_1","activity_type":"delivery","attributes_type":"DeliveryAttributes","renderer_digest":"r1","bundle":{"bytes":1,"modules":1,"files":1}}"#
        )
        XCTAssertEqual(try PrepareManifest.parse(body).templateVersion(sha256: tvReferenceSHA256), derive())
    }

    func testChangesGiveNewIds() {
        let schema = sjson(#"{"properties":{"eta":{"type":"string"}}}"#)
        let r = PrepareManifest.Resource(path: "a.png", sha256: digest, bytes: 1)
        let base = derive(schema: schema, resources: [r])
        let variants = [
            derive(schema: sjson(#"{"properties":{"eta":{"type":"integer"}}}"#), resources: [r]),
            derive(schema: sjson(#"{"properties":{"eta":{"type":"string"}},"required":["eta"]}"#), resources: [r]),
            derive(schema: nil, resources: [r]),
            derive(schema: schema, resources: []),
            derive(schema: schema, resources: [PrepareManifest.Resource(path: "b.png", sha256: digest, bytes: 1)]),
            derive(schema: schema, resources: [PrepareManifest.Resource(path: "a.png", sha256: String(repeating: "1f", count: 32), bytes: 1)]),
            derive(schema: schema, resources: [PrepareManifest.Resource(path: "a.png", sha256: digest, bytes: 2)]),
            derive(binding: "bnd_2", schema: schema, resources: [r]),
            derive(activity: "pickup", schema: schema, resources: [r]),
            derive(attributes: "Other", schema: schema, resources: [r]),
            derive(renderer: "r2", schema: schema, resources: [r])
        ]
        XCTAssertEqual(Set(variants + [base]).count, variants.count + 1)
        // Field boundaries are unambiguous.
        XCTAssertNotEqual(derive(binding: "ab", activity: "c"), derive(binding: "a", activity: "bc"))
    }
}
