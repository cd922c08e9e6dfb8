import Crypto
import XCTest

final class Argon2idTests: XCTestCase {
    func testHashVerifyAndEncoding() throws {
        let secret = Array("lrs_0123_correct horse battery staple".utf8)
        var timings: [Int64] = []
        var encoded = ""
        for _ in 0..<3 {
            let start = ContinuousClock.now
            encoded = try Argon2id.hash(secret)
            let elapsed = (ContinuousClock.now - start).components
            timings.append(elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000)
        }
        print("argon2id m=19456,t=2,p=1 hash times (ms): \(timings)")
        XCTAssertTrue(encoded.hasPrefix("$argon2id$v=19$m=19456,t=2,p=1$"), encoded)
        let fields = encoded.split(separator: "$")
        XCTAssertEqual(fields.count, 5)
        XCTAssertEqual(fields[3].count, 22)  // 16-byte salt, unpadded base64
        XCTAssertEqual(fields[4].count, 43)  // 32-byte tag, unpadded base64
        XCTAssertTrue(Argon2id.verify(secret, encoded: encoded))
        XCTAssertFalse(Argon2id.verify(secret + [0], encoded: encoded))
        XCTAssertFalse(Argon2id.verify([], encoded: encoded))
        XCTAssertNotEqual(try Argon2id.hash(secret), encoded, "salt must be random")
    }

    func testEmptySecretAndCustomParameters() throws {
        let params = Argon2id.Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        let encoded = try Argon2id.hash([], parameters: params)
        XCTAssertTrue(encoded.hasPrefix("$argon2id$v=19$m=64,t=1,p=1$"))
        XCTAssertTrue(Argon2id.verify([], encoded: encoded))
        XCTAssertFalse(Argon2id.verify([1], encoded: encoded))
    }

    func testInvalidParametersThrow() {
        XCTAssertThrowsError(try Argon2id.hash([1], parameters: .init(memoryKiB: 4, iterations: 1, parallelism: 1)))
        XCTAssertThrowsError(try Argon2id.hash([1], parameters: .init(memoryKiB: 64, iterations: 0, parallelism: 1)))
    }

    func testMalformedEncodedIsFalse() throws {
        let secret = Array("s".utf8)
        let good = try Argon2id.hash(secret, parameters: .init(memoryKiB: 64, iterations: 1, parallelism: 1))
        let malformed = [
            "", "garbage", "$argon2id$", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo",
            good.replacingOccurrences(of: "$argon2id$", with: "$argon2d$"),
            good.replacingOccurrences(of: "v=19", with: "v=16"),
            good.replacingOccurrences(of: "m=64", with: "m=99999999"),  // over the cost cap
            good.replacingOccurrences(of: "t=1", with: "t=x"),
            String(good.dropLast(5)),
            good + "$extra",
            good + "\u{0}"
        ]
        for encoded in malformed { XCTAssertFalse(Argon2id.verify(secret, encoded: encoded), encoded) }
        XCTAssertTrue(Argon2id.verify(secret, encoded: good))
    }
}
