import Foundation
import XCTest
import JSON
@testable import LiveRelayCore

/// docs/templates.md retention decisions with an injected clock.
final class RetentionTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 86_400
    let mib: Int64 = 1024 * 1024

    func v(_ n: Int, bytes: Int64 = 10, pins: Set<Retention.Pin> = [], endedDaysAgo: Double? = nil, now: Date? = nil) -> Retention.Version {
        let clock = now ?? t0
        return Retention.Version(
            id: String(format: "tv_%03d", n), bytes: bytes, createdAt: t0.addingTimeInterval(Double(n) - 100 * day),
            pins: pins, lastReferenceEndedAt: endedDaysAgo.map { clock.addingTimeInterval(-$0 * day) })
    }

    func testCollectableExactlySevenDaysAfterLastReference() {
        let released = t0
        let version = Retention.Version(id: "tv_a", bytes: 1, createdAt: t0.addingTimeInterval(-30 * day), pins: [], lastReferenceEndedAt: released)
        XCTAssertFalse(version.isCollectable(now: released.addingTimeInterval(6 * day + 23 * 3600)))
        XCTAssertFalse(version.isCollectable(now: released.addingTimeInterval(7 * day - 1)))
        XCTAssertTrue(version.isCollectable(now: released.addingTimeInterval(7 * day)))
        XCTAssertEqual(version.collectableAt, released.addingTimeInterval(7 * day))
    }

    func testPinnedNeverCollectable() {
        for pin in Retention.Pin.allCases {
            let version = Retention.Version(id: "tv_p", bytes: 1, createdAt: t0, pins: [pin], lastReferenceEndedAt: t0)
            XCTAssertNil(version.collectableAt)
            XCTAssertFalse(version.isCollectable(now: t0.addingTimeInterval(365 * day)), "\(pin)")
        }
    }

    func testWithoutKnownReferenceEndCreationCounts() {
        let version = Retention.Version(id: "tv_c", bytes: 1, createdAt: t0, pins: [], lastReferenceEndedAt: nil)
        XCTAssertFalse(version.isCollectable(now: t0.addingTimeInterval(7 * day - 1)))
        XCTAssertTrue(version.isCollectable(now: t0.addingTimeInterval(7 * day)))
    }

    func testCollectableListIsOldestFirstAndSkipsPinnedAndRecent() {
        let versions = [v(3, endedDaysAgo: 8), v(1, endedDaysAgo: 30), v(2, pins: [.target], endedDaysAgo: 30), v(4, endedDaysAgo: 1)]
        XCTAssertEqual(Retention.collectable(versions, now: t0).map(\.id), ["tv_001", "tv_003"])
    }

    func testUnderLimitsNothingEvicted() throws {
        let existing = (1...63).map { v($0, endedDaysAgo: 30) }
        XCTAssertEqual(try Retention.admit(existing: existing, newBytes: 10, now: t0), [])
    }

    func testSixtyFifthVersionEvictsOldestCollectable() throws {
        var existing = (1...63).map { v($0, endedDaysAgo: 30) }
        existing.append(v(64, pins: [.startTarget]))
        let evicted = try Retention.admit(existing: existing.shuffled(), newBytes: 10, now: t0)
        XCTAssertEqual(evicted.map(\.id), ["tv_001"])
    }

    func testOldestCollectableSkipsPinnedOldOnes() throws {
        var existing = [v(1, pins: [.senderKey], endedDaysAgo: 30), v(2, pins: [.target]), v(3, endedDaysAgo: 2)]
        existing += (4...63).map { v($0, endedDaysAgo: 10) }
        existing.append(v(64, pins: [.startTarget]))
        XCTAssertEqual(try Retention.admit(existing: existing, newBytes: 1, now: t0).map(\.id), ["tv_004"])
    }

    func testAllPinnedIs409() {
        let existing = (1...64).map { v($0, pins: [.target]) }
        XCTAssertThrowsError(try Retention.admit(existing: existing, newBytes: 1, now: t0)) { error in
            let e = error as? DomainError
            XCTAssertEqual(e?.status, 409)
            XCTAssertEqual(e?.code, "TEMPLATE_RETENTION_LIMIT")
            XCTAssertEqual(e?.details["limit"], "versions")
            XCTAssertEqual(e?.details["versions"], .int(65))
            XCTAssertEqual(e?.details["collectable"], .int(0))
            XCTAssertNil(e?.details["next_collectable_at"])
        }
    }

    func testUnpinnedButTooRecentIs409WithNextCollectableTime() {
        // 6 days 23 hours after release: not yet.
        var existing = (1...63).map { v($0, endedDaysAgo: 6 + 23.0 / 24) }
        existing.append(v(64, pins: [.startTarget]))
        XCTAssertThrowsError(try Retention.admit(existing: existing, newBytes: 1, now: t0)) { error in
            let e = error as? DomainError
            XCTAssertEqual(e?.code, "TEMPLATE_RETENTION_LIMIT")
            XCTAssertEqual(e?.details["next_collectable_at"], .string(Timestamp.format(self.t0.addingTimeInterval(3600))))
        }
        // One hour later the oldest goes.
        XCTAssertEqual(try Retention.admit(existing: existing, newBytes: 1, now: t0.addingTimeInterval(3600)).map(\.id), ["tv_001"])
    }

    func testByteLimitBoundary() throws {
        // 16 × 16 MiB = 256 MiB exactly: admitted.
        let sixteen = 16 * mib
        let existing = (1...15).map { v($0, bytes: sixteen, endedDaysAgo: 30) }
        XCTAssertEqual(try Retention.admit(existing: existing, newBytes: sixteen, now: t0), [])
        // One byte over: the oldest collectable goes.
        let full = existing + [v(16, bytes: sixteen, pins: [.startTarget])]
        XCTAssertEqual(try Retention.admit(existing: full, newBytes: 1, now: t0).map(\.id), ["tv_001"])
        // Byte limit needing several evictions: 3 × 16 MiB freed for a 40 MiB newcomer is not
        // possible (max bundle is 16 MiB), but small ones add up: evict until it fits.
        let small = (1...10).map { v($0, bytes: mib, endedDaysAgo: 30) } + [v(11, bytes: 256 * mib - 10 * mib, pins: [.target])]
        XCTAssertEqual(try Retention.admit(existing: small, newBytes: 3 * mib, now: t0).map(\.id), ["tv_001", "tv_002", "tv_003"])
    }

    func testByteLimitAllPinnedIs409() {
        let existing = (1...16).map { v($0, bytes: 16 * mib, pins: [.target]) }
        XCTAssertThrowsError(try Retention.admit(existing: existing, newBytes: 1, now: t0)) { error in
            let e = error as? DomainError
            XCTAssertEqual(e?.code, "TEMPLATE_RETENTION_LIMIT")
            XCTAssertEqual(e?.details["limit"], "bytes")
            XCTAssertEqual(e?.details["bytes"], .int(256 * mib + 1))
        }
    }

    func testNotEnoughCollectableEvictsNothingAndThrows() {
        let existing = [v(1, bytes: mib, endedDaysAgo: 30)] + (2...16).map { v($0, bytes: 16 * mib, pins: [.target]) }
        // 1 MiB collectable + 15 × 16 MiB pinned + 16 MiB new = 257 MiB; freeing 1 MiB fits exactly.
        XCTAssertEqual(try Retention.admit(existing: existing, newBytes: 16 * mib, now: t0).map(\.id), ["tv_001"])
        let heavier = [v(1, bytes: mib, endedDaysAgo: 30)] + (2...17).map { v($0, bytes: 15 * mib, pins: [.target]) }
        // 1 + 240 + 16 = 257 MiB → evict 1 → 256: fits.
        XCTAssertEqual(try Retention.admit(existing: heavier, newBytes: 16 * mib, now: t0).map(\.id), ["tv_001"])
        let tooHeavy = [v(1, bytes: mib, endedDaysAgo: 30)] + (2...17).map { v($0, bytes: 15 * mib + 1, pins: [.target]) }
        XCTAssertThrowsError(try Retention.admit(existing: tooHeavy, newBytes: 16 * mib, now: t0))
    }
}
