import XCTest
import LiveRelayCore

/// Pure rules behind fair delivery (docs/delivery.md): which queued work a new end collapses,
/// and how per-tenant gauges keep their label cardinality bounded.
final class DispatchFairnessRulesTests: XCTestCase {
    let queued = [
        QueuedOperation(id: "op_end1", kind: .end, hasState: false, hasAlert: false),
        QueuedOperation(id: "op_upd", kind: .update, hasState: true, hasAlert: false),
        QueuedOperation(id: "op_alert", kind: .update, hasState: true, hasAlert: true),
        QueuedOperation(id: "op_end2", kind: .end, hasState: true, hasAlert: false),
        QueuedOperation(id: "op_start", kind: .start, hasState: true, hasAlert: true)
    ]

    func testAnEndSupersedesQueuedUpdatesAndOlderEndsButNoStart() {
        XCTAssertEqual(WriteRules.superseded(by: .end, hasState: false, queued: queued), ["op_end1", "op_upd", "op_alert", "op_end2"])
        XCTAssertEqual(WriteRules.superseded(by: .end, hasState: true, queued: queued), ["op_end1", "op_upd", "op_alert", "op_end2"])
    }

    func testAnUpdateNeverSupersedesEnds() {
        XCTAssertEqual(WriteRules.superseded(by: .update, hasState: true, queued: queued), ["op_upd"])
        XCTAssertEqual(WriteRules.superseded(by: .update, hasState: false, queued: queued), [])
    }

    /// docs/write-path.md "Quota kept by the writer": the net change per day of a write's own
    /// insert and supersede, the inserted day first, then older days newest first.
    func testReservationChangesNetPerDayTheInsertedDayFirst() {
        func q(_ id: String, _ day: String?) -> QueuedOperation {
            QueuedOperation(id: id, kind: .update, hasState: true, hasAlert: false, quotaDay: day)
        }
        func pairs(_ c: [(day: String, change: Int64)]) -> [String] { c.map { "\($0.day):\($0.change)" } }
        XCTAssertEqual(pairs(WriteRules.reservationChanges(insertedDay: "2026-12-05", superseded: [])), ["2026-12-05:1"])
        XCTAssertEqual(pairs(WriteRules.reservationChanges(insertedDay: "2026-12-05", superseded: [q("a", "2026-12-05")])), [])
        XCTAssertEqual(pairs(WriteRules.reservationChanges(insertedDay: "2026-12-05", superseded: [q("a", nil)])), ["2026-12-05:1"])
        XCTAssertEqual(
            pairs(
                WriteRules.reservationChanges(
                    insertedDay: "2026-12-05", superseded: [q("a", "2026-12-03"), q("b", "2026-12-04"), q("c", "2026-12-04")])),
            ["2026-12-05:1", "2026-12-04:-2", "2026-12-03:-1"])
        XCTAssertEqual(
            pairs(WriteRules.reservationChanges(insertedDay: nil, superseded: [q("a", "2026-12-03"), q("b", "2026-12-05")])),
            [
                "2026-12-05:-1", "2026-12-03:-1"
            ])
        XCTAssertEqual(WriteRules.reservation(of: "2026-12-05", insertedDay: "2026-12-05", superseded: [q("a", "2026-12-04")]), 1)
        XCTAssertEqual(WriteRules.reservation(of: "2026-12-05", insertedDay: "2026-12-05", superseded: [q("a", "2026-12-05")]), 0)
    }

    func testAWriteKeepsTheHeadExactlyWhenTheFirstQueuedOperationStays() {
        let start = QueuedOperation(id: "s", kind: .start, hasState: true, hasAlert: true)
        let u1 = QueuedOperation(id: "u1", kind: .update, hasState: true, hasAlert: false)
        let alert = QueuedOperation(id: "a", kind: .update, hasState: true, hasAlert: true)
        // An update behind a queued start or alert update supersedes only what follows it.
        for queued in [[start, u1], [alert, u1]] {
            let victims = WriteRules.supersededOperations(by: .update, hasState: true, queued: queued)
            XCTAssertEqual(victims, [u1])
            XCTAssertTrue(WriteRules.keepsHead(queued: queued, victims: victims))
        }
        // The first queued operation superseded, or none queued: the head may change.
        XCTAssertFalse(WriteRules.keepsHead(queued: [u1, alert], victims: [u1]))
        XCTAssertFalse(WriteRules.keepsHead(queued: [], victims: []))
        // An end supersedes every queued update: it keeps the head only behind a start.
        let endVictims = WriteRules.supersededOperations(by: .end, hasState: true, queued: [alert, u1])
        XCTAssertFalse(WriteRules.keepsHead(queued: [alert, u1], victims: endVictims))
        XCTAssertTrue(
            WriteRules.keepsHead(queued: [start, alert], victims: WriteRules.supersededOperations(by: .end, hasState: false, queued: [start, alert])))
    }

    func testGaugesKeepTheDeepestTenantsAndFoldTheRestIntoOther() {
        let entries = (1...5).map { TenantQueueGauges.Entry(tenant: "ten_\($0)", depth: Double($0 * 10), oldestDueSeconds: Double(6 - $0)) }
        let folded = TenantQueueGauges.fold(entries, top: 2)
        XCTAssertEqual(
            folded,
            [
                TenantQueueGauges.Entry(tenant: "ten_5", depth: 50, oldestDueSeconds: 1),
                TenantQueueGauges.Entry(tenant: "ten_4", depth: 40, oldestDueSeconds: 2),
                TenantQueueGauges.Entry(tenant: "other", depth: 60, oldestDueSeconds: 5)
            ])
        XCTAssertEqual(TenantQueueGauges.fold(entries, top: 5).count, 5, "no other series when every tenant fits")
        XCTAssertEqual(TenantQueueGauges.fold(entries, top: 0), [TenantQueueGauges.Entry(tenant: "other", depth: 150, oldestDueSeconds: 5)])
        XCTAssertEqual(TenantQueueGauges.fold([], top: 3), [])
    }

    func testGaugeTiesGoToTheOlderThenTheSmallerTenantId() {
        let e = [
            TenantQueueGauges.Entry(tenant: "ten_b", depth: 5, oldestDueSeconds: 1),
            TenantQueueGauges.Entry(tenant: "ten_a", depth: 5, oldestDueSeconds: 1),
            TenantQueueGauges.Entry(tenant: "ten_c", depth: 5, oldestDueSeconds: 9)
        ]
        XCTAssertEqual(TenantQueueGauges.fold(e, top: 2).map(\.tenant), ["ten_c", "ten_a", "other"])
    }
}
