import Foundation
import JSON
import LiveRelayCore

/// The pure core of `liverelay simulate-device`: one installation of an app as ActivityKit (iOS)
/// or an Android 16 Live Updates app with a LiveRelay SDK would behave, with no I/O. The runner
/// (`DeviceSimulatorRunner`) feeds it the pushes the sandbox recorded for its tokens and carries
/// out the effects it asks for (registering a fresh update token after a remote start).
///
/// Rules (docs/write-semantics.md/docs/providers.md, seed 003):
/// - a push-to-start (APNs `event: start` on a push-to-start token, or an FCM data message with
///   `event: start`) creates the activity named by `attributes.target_id` / `data.target_id`; on
///   iOS the device then registers a fresh update token for it. A second start for the same
///   target is ignored;
/// - `update` and `end` apply only when their `timestamp` is newer than the last one applied to
///   that activity (ActivityKit drops older ones) and the activity is not ended;
/// - every state is validated independently against the template version's pinned schema; a
///   state that does not match (or a template version the device never prepared) is not
///   applied and the lock screen shows a safe placeholder instead;
/// - `end` ends the activity (with its final state when valid) and honours `dismissal-date`: in
///   the past or now → removed from the lock screen at once; later → removed then; absent →
///   the system default (stays up to 4 hours);
/// - iOS 18 channels (Apple "Sending broadcast push notification requests to APNs"): a start
///   carrying `input-push-channel` subscribes the new activity to that channel (it gets no
///   update token); a broadcast (sandbox provider `broadcast`, token = `apns-channel-id`) is
///   applied as an update/end to every active activity subscribed to its channel, under the
///   same timestamp, schema and dismissal rules.
public struct DeviceSimulator: Sendable, Equatable {
    public var state: DeviceSimulatorState

    /// The system's longest stay of an ended activity on the lock screen (docs/limits.md dismissal).
    public static let defaultDismissalSeconds: Int64 = 4 * 3600

    public init(state: DeviceSimulatorState) { self.state = state }

    /// Applies one recorded push. `newToken` makes a fresh update token (iOS start only).
    public mutating func apply(_ push: DevicePush, now: Date, newToken: () -> String) -> DeviceEvent {
        let nowS = Timestamp.epochSeconds(now)
        let content: PushContent
        do { content = try PushContent.parse(push) } catch {
            return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "unreadable push: \(error)")
        }
        // Which activity does this push address?
        var targetId: String?
        switch push.provider {
        case "broadcast":
            guard state.platform == .ios else {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "broadcasts reach iOS devices only")
            }
            let subscribed = state.activities.filter { $0.channelId == push.token && $0.phase == .active }.map(\.targetId)
            guard !subscribed.isEmpty else {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "no activity here is subscribed to this channel")
            }
            guard content.event != .start else {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: subscribed[0], reason: "a broadcast cannot start an activity")
            }
            var last: DeviceEvent?
            for id in subscribed { last = applyChange(content, to: id, sequence: push.sequence, nowS: nowS) }
            return last!
        case "apns":
            if let tpl = state.templates.first(where: { $0.pushToStartToken == push.token }) {
                guard content.event == .start else {
                    return DeviceEvent(
                        sequence: push.sequence, kind: .ignored, targetId: content.targetId,
                        reason: "a \(content.event.rawValue) push on a push-to-start token")
                }
                if let at = content.attributesType, at != tpl.attributesType {
                    return DeviceEvent(
                        sequence: push.sequence, kind: .ignored, targetId: content.targetId,
                        reason: "attributes-type \(at) does not match the push-to-start token's \(tpl.attributesType)")
                }
                targetId = content.targetId
            } else if let a = state.activities.first(where: { $0.updateToken == push.token }) {
                guard content.event != .start else {
                    return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: a.targetId, reason: "a start push on an update token")
                }
                targetId = a.targetId
            } else {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "not one of this device's tokens")
            }
        case "fcm":
            guard push.token == state.fcmToken else {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "not this device's FCM token")
            }
            targetId = content.targetId
        default:
            return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "unknown provider \(push.provider)")
        }
        guard let targetId else {
            return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: nil, reason: "the push names no target_id")
        }

        if content.event == .start {
            if state.activities.contains(where: { $0.targetId == targetId }) {
                return DeviceEvent(sequence: push.sequence, kind: .ignored, targetId: targetId, reason: "duplicate start: the activity exists")
            }
            var a = SimulatedActivity(
                targetId: targetId, activityType: activityType(for: content), origin: "remote",
                templateVersion: content.templateVersion, businessKey: content.businessKey,
                state: .object([:]), revision: content.revision, timestamp: content.timestamp, phase: .active)
            a.alert = content.alert
            a.staleDate = content.staleDate
            a.relevanceScore = content.relevanceScore
            a.placeholder = placeholderReason(templateVersion: content.templateVersion, state: content.state)
            if a.placeholder == nil, let s = content.state { a.state = s }
            var token: String?
            if let channel = content.inputPushChannel {
                a.channelId = channel  // subscribed to broadcasts: no update token
            } else if state.platform == .ios {
                let t = newToken()
                a.updateToken = t
                token = t
            }
            state.activities.append(a)
            return DeviceEvent(
                sequence: push.sequence, kind: .started, targetId: targetId, reason: a.placeholder,
                registerUpdateToken: token)
        }

        return applyChange(content, to: targetId, sequence: push.sequence, nowS: nowS)
    }

    /// Applies an update or end to the activity `targetId` (timestamp, schema and dismissal rules).
    mutating func applyChange(_ content: PushContent, to targetId: String, sequence: Int, nowS: Int64) -> DeviceEvent {
        guard let i = state.activities.firstIndex(where: { $0.targetId == targetId }) else {
            return DeviceEvent(sequence: sequence, kind: .ignored, targetId: targetId, reason: "no such activity on this device")
        }
        var a = state.activities[i]
        guard a.phase == .active else {
            return DeviceEvent(sequence: sequence, kind: .ignored, targetId: targetId, reason: "the activity has ended")
        }
        guard content.timestamp > a.timestamp else {
            return DeviceEvent(
                sequence: sequence, kind: .ignored, targetId: targetId,
                reason: "timestamp \(content.timestamp) is not newer than \(a.timestamp)")
        }
        a.timestamp = content.timestamp
        a.alert = content.alert
        if let r = content.revision { a.revision = r }
        if let s = content.staleDate { a.staleDate = s }
        if let r = content.relevanceScore { a.relevanceScore = r }
        var reason: String?
        if let s = content.state {
            if let problem = placeholderReason(templateVersion: a.templateVersion, state: s) {
                a.placeholder = problem
                reason = problem
            } else {
                a.state = s
                a.placeholder = nil
            }
        }
        let kind: DeviceEvent.Kind
        if content.event == .update {
            kind = .updated
        } else {
            a.phase = .ended
            a.endedAt = content.timestamp
            let dismiss = content.dismissalDate ?? (content.timestamp + Self.defaultDismissalSeconds)
            a.dismissAt = dismiss
            if dismiss <= nowS { a.phase = .dismissed }
            kind = a.phase == .dismissed ? .dismissed : .ended
        }
        state.activities[i] = a
        return DeviceEvent(sequence: sequence, kind: kind, targetId: targetId, reason: reason)
    }

    /// Removes ended activities whose dismissal date has come (the system does this by itself).
    public mutating func tick(now: Date) -> [DeviceEvent] {
        let nowS = Timestamp.epochSeconds(now)
        var out: [DeviceEvent] = []
        for i in state.activities.indices where state.activities[i].phase == .ended {
            if let d = state.activities[i].dismissAt, d <= nowS {
                state.activities[i].phase = .dismissed
                out.append(DeviceEvent(sequence: nil, kind: .dismissed, targetId: state.activities[i].targetId, reason: nil))
            }
        }
        return out
    }

    /// A local start (`POST …/targets` answered with `target`): the activity exists on the
    /// device at once with `state`; iOS gives it `updateToken` to register.
    /// `channelId`: started with `pushType: .channel(id)` (iOS 18): no update token.
    public mutating func localStart(
        targetId: String, activityType: String, templateVersion: String?, businessKey: String?,
        state s: JSONValue, now: Date, updateToken: String?, channelId: String? = nil
    ) -> DeviceEvent {
        var a = SimulatedActivity(
            targetId: targetId, activityType: activityType, origin: "local", templateVersion: templateVersion,
            businessKey: businessKey, state: s, revision: nil, timestamp: 0, phase: .active)
        // Only FCM data messages carry revisions; an iOS device never learns them.
        if state.platform == .android { a.revision = 1 }
        a.updateToken = state.platform == .ios && channelId == nil ? updateToken : nil
        a.channelId = state.platform == .ios ? channelId : nil
        a.placeholder = placeholderReason(templateVersion: templateVersion, state: s)
        state.activities.removeAll { $0.targetId == targetId }
        state.activities.append(a)
        return DeviceEvent(sequence: nil, kind: .started, targetId: targetId, reason: a.placeholder, registerUpdateToken: a.updateToken)
    }

    /// Every token whose deliveries this device reads (push-to-start, update tokens, FCM, and the
    /// channels of its subscribed activities as provider `broadcast`).
    public var watchedTokens: [(provider: String, token: String)] {
        var out: [(String, String)] = []
        if state.platform == .android, let f = state.fcmToken { out.append(("fcm", f)) }
        for t in state.templates { if let p = t.pushToStartToken { out.append(("apns", p)) } }
        for a in state.activities where a.phase == .active { if let u = a.updateToken { out.append(("apns", u)) } }
        let channels = Set(state.activities.filter { $0.phase == .active }.compactMap(\.channelId))
        for c in channels.sorted() { out.append(("broadcast", c)) }
        return out
    }

    /// The per-token cursors to read the sandbox run `currentRun` with. Sandbox sequences start
    /// at 1 in every sandbox process, so cursors recorded in another run (`recordedRun`) would
    /// hide every new push: they are dropped (`restarted` true). Unknown runs on either side
    /// (an old state file, a sandbox that reports none) keep the cursors as they are.
    public static func cursors(_ cursors: [String: Int], recordedRun: String?, currentRun: String?) -> (cursors: [String: Int], restarted: Bool) {
        guard let currentRun, let recordedRun, currentRun != recordedRun else { return (cursors, false) }
        return ([:], true)
    }

    /// Orders pushes the way they reached the device (sandbox sequence), dropping those at or
    /// below each token's cursor.
    public static func pending(_ pushes: [DevicePush], cursors: [String: Int]) -> [DevicePush] {
        pushes.filter { $0.sequence > (cursors[$0.token] ?? 0) }.sorted { $0.sequence < $1.sequence }
    }

    func activityType(for c: PushContent) -> String {
        if let tv = c.templateVersion, let t = state.installedTemplates.first(where: { $0.templateVersion == tv }) { return t.activityType }
        return c.attributesType ?? "activity"
    }

    /// Why `state` cannot be rendered with `templateVersion` on this device, or nil.
    func placeholderReason(templateVersion: String?, state s: JSONValue?) -> String? {
        guard let tv = templateVersion else { return nil }
        guard let t = state.installedTemplates.first(where: { $0.templateVersion == tv }) else {
            return "template \(tv) is not prepared on this device"
        }
        guard let s else { return nil }
        guard case .object = s else { return "the state is not a JSON object" }
        guard let schemaJSON = t.schema else { return nil }
        guard let schema = try? StateSchema.compile(schemaJSON) else { return "the pinned schema does not compile" }
        if let v = schema.validate(s) { return "state does not match the pinned schema at \"\(v.pointer)\": \(v.message)" }
        return nil
    }
}

/// What happened when the device applied a push.
public struct DeviceEvent: Sendable, Equatable {
    public enum Kind: String, Sendable { case started, updated, ended, dismissed, ignored }
    /// The sandbox delivery sequence (nil for local events).
    public var sequence: Int?
    public var kind: Kind
    public var targetId: String?
    /// Why it was ignored, or why the lock screen shows a placeholder.
    public var reason: String?
    /// iOS remote or local start: the update token to register for `targetId`.
    public var registerUpdateToken: String?

    public init(sequence: Int?, kind: Kind, targetId: String?, reason: String?, registerUpdateToken: String? = nil) {
        self.sequence = sequence; self.kind = kind; self.targetId = targetId; self.reason = reason
        self.registerUpdateToken = registerUpdateToken
    }
}

/// One push the sandbox recorded for one of the device's tokens.
public struct DevicePush: Sendable, Equatable {
    public var sequence: Int
    /// `apns`, `fcm` or `broadcast` (then `token` is the `apns-channel-id`).
    public var provider: String
    public var token: String
    /// `{"aps": …}` or `{"message": …}` as sent.
    public var payload: JSONValue
}

extension DevicePush {
    /// From one element of the sandbox's `GET /sandbox/deliveries` `data`.
    public init?(sandboxDelivery d: JSONValue) {
        guard let seq = d["sequence"]?.intValue, let provider = d["provider"]?.stringValue, let token = d["token"]?.stringValue,
            let payload = d["payload"]
        else { return nil }
        self.init(sequence: Int(seq), provider: provider, token: token, payload: payload)
    }
}

/// The platform-neutral content of an APNs Live Activity body or an FCM data message.
struct PushContent: Equatable {
    var event: PushEvent
    var timestamp: Int64
    var targetId: String?
    var templateVersion: String?
    var attributesType: String?
    var businessKey: String?
    var state: JSONValue?
    var alert: DeviceAlert?
    var staleDate: Int64?
    var dismissalDate: Int64?
    var relevanceScore: Double?
    var revision: Int64?
    /// A start's `input-push-channel` (iOS 18 channel subscription).
    var inputPushChannel: String?

    struct Unreadable: Error, CustomStringConvertible { let description: String }

    static func parse(_ p: DevicePush) throws -> PushContent {
        if p.provider == "fcm" {
            guard let data = p.payload["message"]?["data"]?.objectValue else { throw Unreadable(description: "no message.data") }
            func s(_ k: String) -> String? { data[k]?.stringValue }
            guard let ev = s("event").flatMap(PushEvent.init(rawValue:)) else { throw Unreadable(description: "data.event") }
            guard let ts = s("timestamp").flatMap({ Int64($0) }) else { throw Unreadable(description: "data.timestamp") }
            var state: JSONValue?
            if let text = s("state") {
                guard let v = try? JSONValue.parse(text) else { throw Unreadable(description: "data.state is not JSON") }
                state = v
            }
            var alert: DeviceAlert?
            if let t = s("alert_title") { alert = DeviceAlert(title: t, body: s("alert_body") ?? "") }
            return PushContent(
                event: ev, timestamp: ts, targetId: s("target_id"), templateVersion: s("template_version"),
                attributesType: nil, businessKey: nil, state: state, alert: alert,
                staleDate: s("stale_at").flatMap { Int64($0) }, dismissalDate: s("dismiss_at").flatMap { Int64($0) },
                relevanceScore: nil, revision: s("revision").flatMap { Int64($0) })
        }
        guard let aps = p.payload["aps"]?.objectValue else { throw Unreadable(description: "no aps") }
        guard let ev = aps["event"]?.stringValue.flatMap(PushEvent.init(rawValue:)) else { throw Unreadable(description: "aps.event") }
        guard let ts = aps["timestamp"]?.intValue else { throw Unreadable(description: "aps.timestamp") }
        var alert: DeviceAlert?
        if let a = aps["alert"]?.objectValue {
            alert = DeviceAlert(title: a["title"]?.stringValue ?? "", body: a["body"]?.stringValue ?? "")
        }
        let attrs = aps["attributes"]
        return PushContent(
            event: ev, timestamp: ts, targetId: attrs?["target_id"]?.stringValue,
            templateVersion: attrs?["template_version"]?.stringValue, attributesType: aps["attributes-type"]?.stringValue,
            businessKey: attrs?["business_key"]?.stringValue, state: aps["content-state"], alert: alert,
            staleDate: aps["stale-date"]?.intValue, dismissalDate: aps["dismissal-date"]?.intValue,
            relevanceScore: aps["relevance-score"]?.doubleValue, revision: nil,
            inputPushChannel: aps["input-push-channel"]?.stringValue)
    }
}

public struct DeviceAlert: Sendable, Equatable {
    public var title: String
    public var body: String
    public init(title: String, body: String) { self.title = title; self.body = body }
}
