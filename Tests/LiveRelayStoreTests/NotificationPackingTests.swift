import XCTest

@testable import LiveRelayStore

/// `Notifier.packed`: the wake-up ids of `OperationStore.eventsChannel` travel several to a
/// payload, in order, never over the byte limit; other channels and unsplittable payloads
/// travel as they are.
final class NotificationPackingTests: XCTestCase {
    let events = OperationStore.eventsChannel

    func testEventIdsArePackedInOrderAndOtherChannelsKept() {
        let list: [(channel: String, payload: String)] = [
            (events, "op_1"), (OperationStore.dispatchChannel, "ten_a:op_1"), (events, "tgt_1"), (events, "op_2")
        ]
        let out = Notifier.packed(list)
        XCTAssertEqual(out.map(\.channel), [events, OperationStore.dispatchChannel])
        XCTAssertEqual(out[0].payload, "op_1 tgt_1 op_2")
        XCTAssertEqual(out[1].payload, "ten_a:op_1")
    }

    func testPackedPayloadsStayWithinTheLimit() {
        let ids = (0..<1_000).map { "op_" + String(repeating: "x", count: 26) + String($0) }
        let out = Notifier.packed(ids.map { (events, $0) })
        XCTAssertGreaterThan(out.count, 1)
        XCTAssertTrue(out.allSatisfy { $0.payload.utf8.count <= Notifier.packedPayloadBytes })
        XCTAssertEqual(out.flatMap { $0.payload.split(separator: " ").map(String.init) }, ids, "every id once, in order")
    }

    func testPayloadsWithSpacesOrAtTheLimitTravelAlone() {
        let long = String(repeating: "y", count: Notifier.packedPayloadBytes)
        let out = Notifier.packed([(events, "a"), (events, "b c"), (events, long), (events, "d")])
        XCTAssertEqual(out.map(\.payload), ["a d", "b c", long])
    }

    /// The byte limit is exact: two ids that make a payload of exactly `packedPayloadBytes`
    /// bytes with their space travel together; one byte more and they travel apart.
    func testThePackedPayloadLimitIsExact() {
        let half = (Notifier.packedPayloadBytes - 1) / 2
        let a = String(repeating: "a", count: half), b = String(repeating: "b", count: Notifier.packedPayloadBytes - 1 - half)
        let together = Notifier.packed([(events, a), (events, b)])
        XCTAssertEqual(together.map(\.payload), [a + " " + b])
        XCTAssertEqual(together[0].payload.utf8.count, Notifier.packedPayloadBytes)
        let apart = Notifier.packed([(events, a), (events, b + "b")])
        XCTAssertEqual(apart.map(\.payload), [a, b + "b"])
    }
}
