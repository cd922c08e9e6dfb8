import XCTest
@testable import LiveRelayCore

/// docs/credentials.md credential format and docs/http-conventions.md ids.
final class CredentialFormatTests: XCTestCase {
    func testCRC32KnownVector() {
        XCTAssertEqual(CRC32.checksum(Array("123456789".utf8)), 0xCBF4_3926)
        XCTAssertEqual(CRC32.checksum([]), 0)
    }

    func testBase62() {
        XCTAssertEqual(Base62.encode(0, width: 6), "000000")
        XCTAssertEqual(Base62.encode(61, width: 1), "z")
        XCTAssertEqual(Base62.encode(62, width: 1), "10")
        XCTAssertEqual(Base62.encode(UInt64(UInt32.max), width: 6), "4gfFC3")
        XCTAssertEqual(Base62.encode([UInt8](repeating: 0xFF, count: 32), width: 43).count, 43)
        XCTAssertEqual(Base62.encode([0, 0, 1], width: 3), "001")
        XCTAssertEqual(Base62.encode([1, 0], width: 1), "48")  // 256 = 4*62 + 8
    }

    func testIdsAreWellFormedAndTimeOrdered() {
        let a = Identifier.make(.masterKey, now: Date(timeIntervalSince1970: 1_700_000_000))
        let b = Identifier.make(.masterKey, now: Date(timeIntervalSince1970: 1_700_000_000.002))
        XCTAssertTrue(a.hasPrefix("mk_"))
        XCTAssertEqual(a.count, 3 + 26)
        XCTAssertTrue(Identifier.isValid(a, kind: .masterKey))
        XCTAssertFalse(Identifier.isValid(a, kind: .senderKey))
        XCTAssertLessThan(a, b)
        XCTAssertFalse(Identifier.isValid("mk_" + String(repeating: "i", count: 26), kind: .masterKey), "i is not Crockford")
        XCTAssertFalse(Identifier.isValid("mk_" + String(repeating: "0", count: 25), kind: .masterKey))
        XCTAssertNotEqual(Identifier.make(.tenant), Identifier.make(.tenant))
    }

    /// The last 13 characters of an id (bits 65–127: 62 random bits after the variant) take
    /// every Crockford character at each position over many ids: none is stuck at a constant.
    func testIdRandomTailVariesAtEveryPosition() {
        let tails = (0..<4_000).map { _ in Array(Identifier.make(.operation).suffix(13)) }
        for position in 1..<13 {
            XCTAssertEqual(Set(tails.map { $0[position] }).count, 32, "position \(position) of the random tail")
        }
    }

    /// Ids made in one millisecond sort in the order they were made (a listing "newest first"
    /// must not depend on random bits), even past the 12-bit counter; an explicit earlier instant
    /// keeps its own millisecond.
    func testIdsOfOneMillisecondSortInCreationOrder() {
        let instant = Date(timeIntervalSince1970: 1_900_000_000)
        let ids = (0..<10_000).map { _ in Identifier.make(.operation, now: instant) }
        XCTAssertEqual(ids, ids.sorted())
        XCTAssertEqual(Set(ids).count, ids.count)
        let earlier = Identifier.make(.operation, now: Date(timeIntervalSince1970: 1_800_000_000))
        XCTAssertLessThan(earlier, Identifier.make(.operation, now: Date(timeIntervalSince1970: 1_800_000_000.001)))
        XCTAssertLessThan(earlier, ids[0], "an earlier instant sorts first")
        XCTAssertLessThan(ids.last!, Identifier.make(.operation, now: instant.addingTimeInterval(10)))
        // Another caller's instant (an injected clock an hour ahead) interleaved with ids of one
        // millisecond does not break their order.
        let other = Date(timeIntervalSince1970: 1_700_000_000.5)
        let interleaved = (0..<100).map { i -> String in
            _ = Identifier.make(.operation, now: other.addingTimeInterval(i % 2 == 0 ? 3600 : 0))
            return Identifier.make(.operation, now: other)
        }
        XCTAssertEqual(interleaved, interleaved.sorted())
    }

    func testCrockfordEncodingOfKnownValue() {
        var bytes = [UInt8](repeating: 0, count: 16)
        bytes[15] = 33  // 33 = 1*32 + 1
        XCTAssertEqual(CrockfordBase32.encode128(bytes), String(repeating: "0", count: 24) + "11")
        XCTAssertEqual(CrockfordBase32.encode128([UInt8](repeating: 0xFF, count: 16)), "7" + String(repeating: "z", count: 25))
    }

    func testTokenRoundTripAndChecksum() throws {
        let id = Identifier.make(.senderKey)
        let secret = (0..<32).map { UInt8($0 * 7 & 0xFF) }
        let (token, parsed) = CredentialToken.make(kind: .sender, id: id, secretBytes: secret)
        XCTAssertTrue(token.hasPrefix("lrs_" + id.dropFirst(3) + "_"))
        XCTAssertEqual(token.count, 4 + 26 + 1 + 43 + 6)
        XCTAssertEqual(CredentialToken.parse(token), parsed)
        XCTAssertEqual(parsed.id, id)
        // Any single-character change breaks the checksum or the form.
        var chars = Array(token)
        for i in [0, 5, 40, token.count - 1] {
            var c = chars
            c[i] = c[i] == "A" ? "B" : "A"
            XCTAssertNil(CredentialToken.parse(String(c)), "mutation at \(i) accepted")
        }
        chars.removeLast()
        XCTAssertNil(CredentialToken.parse(String(chars)))
        XCTAssertNil(CredentialToken.parse(""))
        XCTAssertNil(CredentialToken.parse("lrx" + token.dropFirst(3)))
    }

    func testEveryKindParses() {
        for kind in CredentialKind.allCases {
            let (token, _) = CredentialToken.make(kind: kind, id: Identifier.make(kind.idKind), secretBytes: [UInt8](repeating: 9, count: 32))
            XCTAssertEqual(CredentialToken.parse(token)?.kind, kind)
            XCTAssertTrue(CredentialToken.parse(token)!.id.hasPrefix(kind.idKind.rawValue + "_"))
        }
    }
}
