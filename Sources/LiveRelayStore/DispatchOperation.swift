import Foundation
import JSON
import LiveRelayCore
import Postgres

/// An operation as the dispatcher sees it: the operation row plus everything needed to build
/// its push (target snapshot, tokens, installation, template `attributes-type`).
public struct DispatchOperation: Sendable, Equatable {
    /// The row's fields in one box shared by every copy of the operation: the dispatcher copies
    /// each operation into its job, its completion and its result, and a copy of ~35 fields was
    /// a retain and a release of each (about a tenth of the dispatching process's CPU in a
    /// DWARF profile of a fan-out wave); of one shared box, it is one.
    let box: Box

    public var tenantId: String { box.fields.tenantId }
    public var id: String { box.fields.id }
    public var targetId: String { box.fields.targetId }
    public var seq: Int64 { box.fields.seq }
    public var kind: PushEvent { box.fields.kind }
    public var revision: Int64 { box.fields.revision }
    public var hasState: Bool { box.fields.hasState }
    /// The operation's own committed snapshot (nil for a stateless end).
    public var state: JSONValue? { box.fields.state }
    public var alert: PushAlert? { box.fields.alert }
    public var staleAt: Date? { box.fields.staleAt }
    public var relevanceScore: Double? { box.fields.relevanceScore }
    public var priority: Int { box.fields.priority }
    public var expiresAt: Date? { box.fields.expiresAt }
    public var dismissAt: Date? { box.fields.dismissAt }
    public var consumesQuota: Bool { box.fields.consumesQuota }
    public var quotaDay: String? { box.fields.quotaDay }
    /// Attempts including the current one (after a claim), or so far (rescue, expiry).
    public var attempts: Int { box.fields.attempts }
    public var createdAt: Date { box.fields.createdAt }
    /// The APNs `timestamp` (epoch s) of this operation: assigned on the first claim, kept for resends.
    public var providerTimestamp: Int64? { box.fields.providerTimestamp }

    public var installationId: String { box.fields.installationId }
    public var startTargetId: String? { box.fields.startTargetId }
    public var templateVersion: String? { box.fields.templateVersion }
    public var businessKey: String? { box.fields.businessKey }
    /// The target's current committed state (sent by a stateless end).
    public var targetState: JSONValue { box.fields.targetState }
    public var targetStatus: String { box.fields.targetStatus }
    public var pushToken: String? { box.fields.pushToken }
    public var lastTimestamp: Int64 { box.fields.lastTimestamp }
    /// `ios` or `android`.
    public var platform: String { box.fields.platform }
    /// `sandbox` or `production`.
    public var environment: String { box.fields.environment }
    public var appId: String { box.fields.appId }
    public var fcmToken: String? { box.fields.fcmToken }
    public var pushToStartToken: String? { box.fields.pushToStartToken }
    public var attributesType: String? { box.fields.attributesType }
    /// The channel of a member (FCM `data.channel_id`, docs/channels.md), and — for an iOS 18+
    /// member's start — the APNs channel id sent as `input-push-channel`.
    public var channelId: String? { box.fields.channelId }
    public var inputPushChannel: String? { box.fields.inputPushChannel }
    /// Priority budget (docs/priority-budget.md): `sent_priority` as stored, the target's
    /// window (epoch ms) and budget (nil: Android) as claimed, and the decision the claim took
    /// (`DispatchStore.decidePriorities`) with its time in epoch ms.
    public var sentPriority: Int? { box.fields.sentPriority }
    public var priority10Sends: [Int64] { box.fields.priority10Sends }
    public var priority10Budget: Int? { box.fields.priority10Budget }
    public internal(set) var budgetDecision: PriorityBudget.Decision?
    public internal(set) var budgetDecidedAtMs: Int64?
    /// The `sent_at` the claim that took this operation wrote: PostgreSQL's text of that claim
    /// statement's `statement_timestamp()`, distinct for every claim of the operation. The fence
    /// of `DispatchStore.unclaim`: a late return to the queue never touches a later claim of
    /// the same operation. nil outside a claim's result.
    public internal(set) var claimedAt: String? = nil

    /// The `apns-priority` to send: the budget decision's, else the requested `priority`.
    public var sendPriority: Int { budgetDecision?.priority ?? priority }

    init(row r: PostgresRow) throws {
        var none: JSONParseCache? = nil
        try self.init(row: r, cache: &none)
    }

    /// Parsed JSON texts by text, for decoding many rows that share them (a fan-out batch: every
    /// operation carries its channel write's state, every member that state after the walk).
    /// Keyed by the UTF-8 bytes: `String` equality is canonical equivalence, and two texts that
    /// differ only in Unicode normalization must keep their own bytes.
    typealias JSONParseCache = [[UInt8]: JSONValue]

    /// `init(row:)`, parsing each distinct `state` / `target_state` text once per `cache` (nil: no cache).
    init(row r: PostgresRow, cache: inout JSONParseCache?) throws {
        box = Box(try Fields(row: r, cache: &cache))
    }

    private init(copy o: DispatchOperation, attempts: Int, providerTimestamp: Int64) {
        var f = o.box.fields
        f.attempts = attempts
        f.providerTimestamp = providerTimestamp
        f.lastTimestamp = max(f.lastTimestamp, providerTimestamp)
        box = Box(f)
        budgetDecision = o.budgetDecision; budgetDecidedAtMs = o.budgetDecidedAtMs; claimedAt = o.claimedAt
    }

    /// The fields of `DispatchOperation` (see its properties); immutable once in a `Box`.
    struct Fields: Sendable, Equatable {
        var tenantId: String
        var id: String
        var targetId: String
        var seq: Int64
        var kind: PushEvent
        var revision: Int64
        var hasState: Bool
        var state: JSONValue?
        var alert: PushAlert?
        var staleAt: Date?
        var relevanceScore: Double?
        var priority: Int
        var expiresAt: Date?
        var dismissAt: Date?
        var consumesQuota: Bool
        var quotaDay: String?
        var attempts: Int
        var createdAt: Date
        var providerTimestamp: Int64?
        var installationId: String
        var startTargetId: String?
        var templateVersion: String?
        var businessKey: String?
        var targetState: JSONValue
        var targetStatus: String
        var pushToken: String?
        var lastTimestamp: Int64
        var platform: String
        var environment: String
        var appId: String
        var fcmToken: String?
        var pushToStartToken: String?
        var attributesType: String?
        var channelId: String?
        var inputPushChannel: String?
        var sentPriority: Int?
        var priority10Sends: [Int64]
        var priority10Budget: Int?

        init(row r: PostgresRow, cache: inout JSONParseCache?) throws {
            func parse(_ text: String) throws -> JSONValue {
                guard cache != nil else { return try JSONValue.parse(text, maxDepth: 128) }
                let key = Array(text.utf8)
                if let hit = cache?[key] { return hit }
                let v = try JSONValue.parse(text, maxDepth: 128)
                cache?[key] = v
                return v
            }
            tenantId = try r.string("tenant_id"); id = try r.string("id"); targetId = try r.string("target_id"); seq = try r.int64("seq")
            guard let k = PushEvent(rawValue: try r.string("kind")) else { throw PostgresError(kind: .decoding, message: "bad operation kind") }
            kind = k
            revision = try r.int64("revision"); hasState = try r.bool("has_state")
            state = try r.optionalString("state").map(parse)
            alert = try r.optionalString("alert").flatMap(PushAlert.init(jsonText:))
            staleAt = try r.optionalDate("stale_at"); relevanceScore = try r.optionalDouble("relevance_score"); priority = try r.int("priority")
            expiresAt = try r.optionalDate("expires_at"); dismissAt = try r.optionalDate("dismiss_at")
            consumesQuota = try r.bool("consumes_quota"); quotaDay = try r.optionalString("quota_day")
            attempts = try r.int("attempts"); createdAt = try r.date("created_at"); providerTimestamp = try r.optionalInt64("provider_timestamp")
            installationId = try r.string("installation_id"); startTargetId = try r.optionalString("start_target_id")
            templateVersion = try r.optionalString("template_version"); businessKey = try r.optionalString("business_key")
            targetState = try parse(try r.string("target_state"))
            targetStatus = try r.string("target_status"); pushToken = try r.optionalString("push_token")
            lastTimestamp = try r.int64("last_timestamp")
            platform = try r.string("platform"); environment = try r.string("environment"); appId = try r.string("app_id")
            fcmToken = try r.optionalString("fcm_token"); pushToStartToken = try r.optionalString("push_to_start_token")
            attributesType = try r.optionalString("attributes_type")
            channelId = try r.optionalString("channel_id"); inputPushChannel = try r.optionalString("input_push_channel")
            sentPriority = try r.optionalInt("sent_priority"); priority10Sends = try r.stringArray("priority10_sends").compactMap { Int64($0) }
            priority10Budget = try r.optionalInt("priority10_budget")
        }
    }

    /// `Fields` behind one reference (see `box`).
    final class Box: Sendable, Equatable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
        static func == (a: Box, b: Box) -> Bool { a === b || a.fields == b.fields }
    }

    func claimed(providerTimestamp ts: Int64) -> DispatchOperation { DispatchOperation(copy: self, attempts: attempts + 1, providerTimestamp: ts) }

    /// An operation inserted in flight (docs/delivery.md "Claims at fan-out"), read in the
    /// statement that inserted it: attempts and APNs `timestamp` (Unix seconds) as inserted,
    /// the target's clock (read before the statement's stamp) raised to that timestamp.
    func stampedAtInsert() -> DispatchOperation {
        DispatchOperation(copy: self, attempts: attempts, providerTimestamp: providerTimestamp ?? lastTimestamp)
    }

    /// The token this operation's push goes to: Android → the installation's FCM token; iOS
    /// start → the start target's push-to-start token; iOS update/end → the activity's update token.
    public var deviceToken: String? {
        if platform == "android" { return fcmToken }
        return kind == .start ? pushToStartToken : pushToken
    }

    /// The facts the transition table needs.
    public var facts: DispatchOperationFacts {
        DispatchOperationFacts(
            kind: kind, hasState: hasState, hasAlert: alert != nil, consumesQuota: consumesQuota,
            attempts: attempts, expiresAt: expiresAt, platform: platform)
    }
}

/// Which row state an apply must still find (fencing against a worker that lost its lease).
public enum DispatchApplyGuard: Sendable, Equatable {
    /// `sending`, leased by `owner`, on attempt `attempts` (a normal result).
    case lease(owner: String, attempts: Int)
    /// `sending` with an expired lease (rescue of a dead worker's send).
    case expiredLease
    /// `queued` (expiry of an operation never sent).
    case queued
}
