/// Sender-key permissions (docs/credentials.md "Sender key coverage").
public enum Permission: String, Sendable, CaseIterable, Comparable {
    case start = "activities:start"
    case readState = "activities:read-state"
    case update = "activities:update"
    case end = "activities:end"

    public static func < (a: Permission, b: Permission) -> Bool { a.rawValue < b.rawValue }
}

/// What a sender key may reach: its `targets` (start target ids and/or target ids),
/// `created_from` (start target ids) and `permissions` (docs/credentials.md).
public struct SenderScope: Sendable, Equatable {
    /// The sender key's own id (`sk_…`), used for the "created by this same key" rule.
    public let keyId: String
    public let targets: Set<String>
    public let createdFrom: Set<String>
    public let permissions: Set<Permission>

    public init(keyId: String, targets: Set<String>, createdFrom: Set<String>, permissions: Set<Permission>) {
        self.keyId = keyId
        self.targets = targets
        self.createdFrom = createdFrom
        self.permissions = permissions
    }
}

/// The facts about one live-activity target that coverage depends on.
public struct TargetOwnership: Sendable, Equatable {
    /// The target id (`tgt_…`).
    public let targetId: String
    /// The start target it was remotely started from; nil for a local start.
    public let startTargetId: String?
    /// The sender key that created it by a remote start; nil for a local start or a
    /// start by any other means.
    public let createdByKeyId: String?

    public init(targetId: String, startTargetId: String?, createdByKeyId: String?) {
        self.targetId = targetId
        self.startTargetId = startTargetId
        self.createdByKeyId = createdByKeyId
    }
}

/// An action on live activities that coverage is decided for.
public enum TargetAction: Sendable, Equatable {
    case update, end, readState, readMetadata

    var permission: Permission? {
        switch self {
        case .update: return .update
        case .end: return .end
        case .readState: return .readState
        case .readMetadata: return nil
        }
    }
}

/// The pure coverage rules of docs/credentials.md.
public enum Coverage {
    /// May `scope` start an activity from start target `startTargetId`?
    /// Needs `activities:start` and the start target id in `targets`.
    public static func canStart(_ scope: SenderScope, startTargetId: String) -> Bool {
        scope.permissions.contains(.start) && scope.targets.contains(startTargetId)
    }

    /// Does `scope` cover `target` at all (ignoring permissions)? True when the target id is
    /// in `targets`, or its start target is in `created_from` **and** this same key created
    /// it. `created_from` never covers another key's instances or local starts.
    public static func covers(_ scope: SenderScope, _ target: TargetOwnership) -> Bool {
        if scope.targets.contains(target.targetId) { return true }
        guard let st = target.startTargetId, let creator = target.createdByKeyId else { return false }
        return scope.createdFrom.contains(st) && creator == scope.keyId
    }

    /// May `scope` perform `action` on `target`? Update, end and read-state need their
    /// permission plus coverage; reading metadata (the target object, its operations) needs
    /// coverage and any activity permission. A start-only key therefore cannot update the
    /// activity it created.
    public static func allows(_ scope: SenderScope, _ action: TargetAction, on target: TargetOwnership) -> Bool {
        guard covers(scope, target) else { return false }
        if let p = action.permission { return scope.permissions.contains(p) }
        return !scope.permissions.isEmpty
    }
}
