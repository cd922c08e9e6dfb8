import XCTest
@testable import LiveRelayCore

/// docs/credentials.md "Sender key coverage", exhaustively over permissions × relations.
final class CoverageTests: XCTestCase {
    let st = "st_a", other = "st_b"

    func scope(_ perms: Set<Permission>, targets: Set<String> = [], createdFrom: Set<String> = [], key: String = "sk_1") -> SenderScope {
        SenderScope(keyId: key, targets: targets, createdFrom: createdFrom, permissions: perms)
    }

    func testStartNeedsPermissionAndStartTargetInTargets() {
        XCTAssertTrue(Coverage.canStart(scope([.start], targets: [st]), startTargetId: st))
        XCTAssertFalse(Coverage.canStart(scope([.start], targets: [other]), startTargetId: st))
        XCTAssertFalse(Coverage.canStart(scope([.start], createdFrom: [st]), startTargetId: st), "created_from does not grant start")
        XCTAssertFalse(Coverage.canStart(scope([.update, .end, .readState], targets: [st]), startTargetId: st))
    }

    func testExhaustiveMatrix() {
        let mine = TargetOwnership(targetId: "tgt_1", startTargetId: st, createdByKeyId: "sk_1")
        let othersKey = TargetOwnership(targetId: "tgt_2", startTargetId: st, createdByKeyId: "sk_2")
        let local = TargetOwnership(targetId: "tgt_3", startTargetId: nil, createdByKeyId: nil)
        let otherStart = TargetOwnership(targetId: "tgt_4", startTargetId: other, createdByKeyId: "sk_1")
        let allPerms = Permission.allCases
        for mask in 0..<(1 << allPerms.count) {
            let perms = Set(allPerms.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element))
            for action in [TargetAction.update, .end, .readState, .readMetadata] {
                let needed: Bool = {
                    switch action {
                    case .update: return perms.contains(.update)
                    case .end: return perms.contains(.end)
                    case .readState: return perms.contains(.readState)
                    case .readMetadata: return !perms.isEmpty
                    }
                }()
                let viaCreatedFrom = scope(perms, createdFrom: [st])
                XCTAssertEqual(Coverage.allows(viaCreatedFrom, action, on: mine), needed, "own instance via created_from \(perms) \(action)")
                XCTAssertFalse(Coverage.allows(viaCreatedFrom, action, on: othersKey), "another key's instance")
                XCTAssertFalse(Coverage.allows(viaCreatedFrom, action, on: local), "local start")
                XCTAssertFalse(Coverage.allows(viaCreatedFrom, action, on: otherStart), "other start target")
                let explicit = scope(perms, targets: ["tgt_2", "tgt_3"])
                XCTAssertEqual(Coverage.allows(explicit, action, on: othersKey), needed, "explicit target id")
                XCTAssertEqual(Coverage.allows(explicit, action, on: local), needed, "explicit local target id")
                XCTAssertFalse(Coverage.allows(explicit, action, on: mine))
            }
        }
    }

    func testStartOnlyKeyCannotUpdateWhatItCreated() {
        let s = scope([.start], targets: [st], createdFrom: [st])
        let created = TargetOwnership(targetId: "tgt_9", startTargetId: st, createdByKeyId: "sk_1")
        XCTAssertFalse(Coverage.allows(s, .update, on: created))
        XCTAssertFalse(Coverage.allows(s, .end, on: created))
        XCTAssertFalse(Coverage.allows(s, .readState, on: created))
    }
}
