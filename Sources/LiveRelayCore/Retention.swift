import Foundation
import JSON

/// Template-version retention (docs/templates.md): per binding at most 64 versions and 256 MiB (sum of
/// `bundle.bytes`); a version is *pinned* while referenced, and *collectable* 7 days after its
/// last reference ended. Pure decisions over values; the Store loads the facts and carries the
/// decisions out, so every rule here is unit-tested with an injected clock.
public enum Retention {
    /// At most 64 template versions per binding.
    public static let maxVersionsPerBinding = 64
    /// At most 256 MiB (268,435,456 bytes) of `bundle.bytes` per binding.
    public static let maxBytesPerBinding: Int64 = 256 * 1024 * 1024
    /// An unpinned version becomes collectable this long after its last reference ended (7 days).
    public static let collectableAfter: TimeInterval = 7 * 24 * 60 * 60

    /// Why a version is pinned (docs/templates.md).
    public enum Pin: String, Sendable, Hashable, CaseIterable, Comparable {
        /// A non-terminal target (status not `ended`/`creation_failed`) uses it.
        case target
        /// It is the current version of a start target that is not retired.
        case startTarget = "start_target"
        /// It is the current version of a start target named in the `targets` of an unrevoked,
        /// unexpired sender key (even when that start target is retired).
        case senderKey = "sender_key"

        public static func < (a: Pin, b: Pin) -> Bool { a.rawValue < b.rawValue }
    }

    /// The retention facts of one stored template version.
    public struct Version: Sendable, Equatable {
        /// `tv_…`.
        public let id: String
        /// `bundle.bytes` of the version.
        public let bytes: Int64
        /// When the version was first stored.
        public let createdAt: Date
        /// Current references (empty: unpinned).
        public let pins: Set<Pin>
        /// When its last reference ended: the latest of "stopped being a start target's
        /// current version" (`released_at`), "its retired start target was retired", "a target
        /// using it ended" and "a sender key naming its start target was revoked or expired".
        /// nil when none is known; then `createdAt` counts.
        public let lastReferenceEndedAt: Date?

        public init(id: String, bytes: Int64, createdAt: Date, pins: Set<Pin>, lastReferenceEndedAt: Date?) {
            self.id = id
            self.bytes = bytes
            self.createdAt = createdAt
            self.pins = pins
            self.lastReferenceEndedAt = lastReferenceEndedAt
        }

        /// True while any reference holds it.
        public var isPinned: Bool { !pins.isEmpty }

        /// The instant it becomes (or became) collectable; nil while pinned.
        public var collectableAt: Date? {
            isPinned ? nil : (lastReferenceEndedAt ?? createdAt).addingTimeInterval(Retention.collectableAfter)
        }

        /// Whether it may be deleted at `now` (unpinned and 7 days, inclusive, since the last
        /// reference ended).
        public func isCollectable(now: Date) -> Bool {
            guard let at = collectableAt else { return false }
            return at <= now
        }
    }

    /// "Oldest first": creation time, then id (ids are content hashes, so the order is total).
    static func oldestFirst(_ a: Version, _ b: Version) -> Bool {
        if a.createdAt != b.createdAt { return a.createdAt < b.createdAt }
        return a.id.utf8.lexicographicallyPrecedes(b.id.utf8)
    }

    /// Every version the periodic GC may delete at `now`, oldest first.
    public static func collectable(_ versions: [Version], now: Date) -> [Version] {
        versions.filter { $0.isCollectable(now: now) }.sorted(by: oldestFirst)
    }

    /// Admits one new version of `newBytes` into a binding that already stores `existing`
    /// (which must not contain the new version). Returns the versions to delete first — the
    /// oldest collectable ones, only as many as needed to get back within 64 versions and
    /// 256 MiB — or throws `409 TEMPLATE_RETENTION_LIMIT` when deleting every collectable
    /// version would still leave the binding over a limit. Nothing is deleted in that case.
    ///
    /// `details`: `limit` (`"versions"` or `"bytes"`, the limit still exceeded), `versions`,
    /// `max_versions`, `bytes`, `max_bytes` (after admission, before any deletion),
    /// `collectable` (how many could go), and `next_collectable_at` (the earliest time an
    /// unpinned version becomes collectable; absent when all are pinned).
    public static func admit(existing: [Version], newBytes: Int64, now: Date) throws -> [Version] {
        var count = existing.count + 1
        var bytes = existing.reduce(Int64(0)) { $0 + $1.bytes } + newBytes
        let candidates = collectable(existing, now: now)
        var evict: [Version] = []
        var next = candidates.makeIterator()
        while count > maxVersionsPerBinding || bytes > maxBytesPerBinding {
            guard let v = next.next() else {
                let totalVersions = existing.count + 1
                let totalBytes = existing.reduce(Int64(0)) { $0 + $1.bytes } + newBytes
                let which = count > maxVersionsPerBinding ? "versions" : "bytes"
                var details: [String: JSONValue] = [
                    "limit": .string(which), "versions": .int(Int64(totalVersions)), "max_versions": .int(Int64(maxVersionsPerBinding)),
                    "bytes": .int(totalBytes), "max_bytes": .int(maxBytesPerBinding), "collectable": .int(Int64(candidates.count))
                ]
                let upcoming = existing.compactMap(\.collectableAt).filter { $0 > now }.min()
                if let upcoming { details["next_collectable_at"] = .string(Timestamp.format(upcoming)) }
                let what =
                    which == "versions"
                    ? "\(totalVersions) template versions; the limit is \(maxVersionsPerBinding)"
                    : "\(totalBytes) bundle bytes; the limit is \(maxBytesPerBinding)"
                throw DomainError(
                    status: 409, code: "TEMPLATE_RETENTION_LIMIT",
                    message:
                        "this binding would hold \(what), and no older version is collectable (versions are kept while pinned and for 7 days after their last reference ended)",
                    details: details)
            }
            evict.append(v)
            count -= 1
            bytes -= v.bytes
        }
        return evict
    }
}
