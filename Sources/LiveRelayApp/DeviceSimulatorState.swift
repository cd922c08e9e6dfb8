import Foundation
import JSON

/// `ios` or `android`.
public enum DevicePlatform: String, Sendable, Equatable { case ios, android }

/// A template version the device prepared (it keeps the frozen bundle and pinned schema), and
/// the start target it was prepared for.
public struct SimulatedTemplate: Sendable, Equatable {
    public var startTargetId: String
    public var templateVersion: String
    public var bindingId: String
    public var activityType: String
    public var attributesType: String
    public var schema: JSONValue?
    /// iOS: the push-to-start token registered for the start target (the latest one).
    public var pushToStartToken: String?

    public init(
        startTargetId: String, templateVersion: String, bindingId: String, activityType: String, attributesType: String,
        schema: JSONValue?, pushToStartToken: String?
    ) {
        self.startTargetId = startTargetId; self.templateVersion = templateVersion; self.bindingId = bindingId
        self.activityType = activityType; self.attributesType = attributesType; self.schema = schema
        self.pushToStartToken = pushToStartToken
    }
}

/// One live activity on the device.
public struct SimulatedActivity: Sendable, Equatable {
    public enum Phase: String, Sendable { case active, ended, dismissed }
    public var targetId: String
    public var activityType: String
    /// `remote` (push-to-start) or `local`.
    public var origin: String
    public var templateVersion: String?
    public var businessKey: String?
    /// The last state that matched the pinned schema.
    public var state: JSONValue
    public var revision: Int64?
    /// Epoch seconds of the last applied push (0 for a local start before any push).
    public var timestamp: Int64
    public var phase: Phase
    /// iOS: this activity's update token.
    public var updateToken: String?
    /// The alert of the last applied push (a one-time banner; the next push replaces it).
    public var alert: DeviceAlert?
    public var staleDate: Int64?
    public var relevanceScore: Double?
    public var endedAt: Int64?
    public var dismissAt: Int64?
    /// Set when the last state could not be rendered: the lock screen shows a placeholder.
    public var placeholder: String?
    /// iOS 18+: the APNs broadcast channel (`apns-channel-id`) the activity is subscribed to
    /// (started with `input-push-channel`, or locally with `pushType: .channel(id)`); such an
    /// activity has no update token and receives the channel's broadcasts.
    public var channelId: String?

    public init(
        targetId: String, activityType: String, origin: String, templateVersion: String?, businessKey: String?,
        state: JSONValue, revision: Int64?, timestamp: Int64, phase: Phase
    ) {
        self.targetId = targetId; self.activityType = activityType; self.origin = origin; self.templateVersion = templateVersion
        self.businessKey = businessKey; self.state = state; self.revision = revision; self.timestamp = timestamp; self.phase = phase
    }
}

/// Everything `simulate-device` remembers between invocations (the `--state-file`).
public struct DeviceSimulatorState: Sendable, Equatable {
    public var platform: DevicePlatform
    public var appId: String
    public var environment: String
    /// LiveRelay API base URL.
    public var apiURL: String
    /// The sandbox control endpoint (`GET /sandbox/deliveries`).
    public var sandboxURL: String
    /// The app's client-generated install id (registration is idempotent on it).
    public var installId: String
    public var installationId: String?
    /// The installation credential (`lri_…`).
    public var credential: String?
    /// The OS version the installation reports at registration (`os_version`, e.g. `18.2`);
    /// nil reports none.
    public var osVersion: String?
    /// Android: the FCM registration token.
    public var fcmToken: String?
    /// Current start targets (one per binding + activity type), newest preparation last.
    public var templates: [SimulatedTemplate]
    /// Every template version ever prepared here (kept: running activities render with theirs).
    public var installedTemplates: [SimulatedTemplate]
    public var activities: [SimulatedActivity]
    /// Per token: the highest sandbox delivery sequence already applied, in the sandbox run
    /// `sandboxRunId` (sequences start over when the sandbox restarts).
    public var cursors: [String: Int]
    /// The sandbox run (`run_id` of `GET /sandbox/deliveries`) the cursors count in; nil until
    /// the first read.
    public var sandboxRunId: String?

    public init(
        platform: DevicePlatform, appId: String, environment: String = "sandbox", apiURL: String, sandboxURL: String,
        installId: String = UUID().uuidString.lowercased(), installationId: String? = nil, credential: String? = nil,
        fcmToken: String? = nil
    ) {
        self.platform = platform; self.appId = appId; self.environment = environment; self.apiURL = apiURL
        self.sandboxURL = sandboxURL; self.installId = installId; self.installationId = installationId
        self.credential = credential; self.fcmToken = fcmToken
        templates = []; installedTemplates = []; activities = []; cursors = [:]
    }

    /// Records a preparation: the start target's current template, and the version as installed.
    public mutating func prepared(_ t: SimulatedTemplate) {
        if let i = templates.firstIndex(where: { $0.startTargetId == t.startTargetId }) {
            var n = t
            if n.pushToStartToken == nil { n.pushToStartToken = templates[i].pushToStartToken }
            templates[i] = n
        } else {
            templates.append(t)
        }
        if !installedTemplates.contains(where: { $0.templateVersion == t.templateVersion }) { installedTemplates.append(t) }
    }

    public func activity(_ targetId: String) -> SimulatedActivity? { activities.first { $0.targetId == targetId } }
}

// MARK: JSON form of the state file

extension DeviceSimulatorState {
    public var json: JSONValue {
        func opt(_ s: String?) -> JSONValue { s.map(JSONValue.string) ?? .null }
        func optI(_ i: Int64?) -> JSONValue { i.map(JSONValue.int) ?? .null }
        func tpl(_ t: SimulatedTemplate) -> JSONValue {
            .object([
                "start_target_id": .string(t.startTargetId), "template_version": .string(t.templateVersion),
                "binding_id": .string(t.bindingId), "activity_type": .string(t.activityType),
                "attributes_type": .string(t.attributesType), "schema": t.schema ?? .null,
                "push_to_start_token": opt(t.pushToStartToken)
            ])
        }
        return .object([
            "platform": .string(platform.rawValue), "app_id": .string(appId), "environment": .string(environment),
            "api_url": .string(apiURL), "sandbox_url": .string(sandboxURL), "install_id": .string(installId),
            "installation_id": opt(installationId), "credential": opt(credential), "fcm_token": opt(fcmToken),
            "os_version": opt(osVersion),
            "templates": .array(templates.map(tpl)), "installed_templates": .array(installedTemplates.map(tpl)),
            "activities": .array(
                activities.map { a in
                    .object([
                        "target_id": .string(a.targetId), "activity_type": .string(a.activityType), "origin": .string(a.origin),
                        "template_version": opt(a.templateVersion), "business_key": opt(a.businessKey), "state": a.state,
                        "revision": optI(a.revision), "timestamp": .int(a.timestamp), "phase": .string(a.phase.rawValue),
                        "update_token": opt(a.updateToken),
                        "alert": a.alert.map { .object(["title": .string($0.title), "body": .string($0.body)]) } ?? .null,
                        "stale_date": optI(a.staleDate), "relevance_score": a.relevanceScore.map(JSONValue.double) ?? .null,
                        "ended_at": optI(a.endedAt), "dismiss_at": optI(a.dismissAt), "placeholder": opt(a.placeholder),
                        "channel_id": opt(a.channelId)
                    ])
                }),
            "cursors": .object(cursors.mapValues { .int(Int64($0)) }),
            "sandbox_run_id": opt(sandboxRunId)
        ])
    }

    public struct Invalid: Error, CustomStringConvertible { public let description: String }

    public init(json v: JSONValue) throws {
        func req(_ k: String) throws -> String {
            guard let s = v[k]?.stringValue else { throw Invalid(description: "the state file has no \(k)") }
            return s
        }
        guard let p = DevicePlatform(rawValue: try req("platform")) else { throw Invalid(description: "platform must be ios or android") }
        self.init(
            platform: p, appId: try req("app_id"), environment: try req("environment"), apiURL: try req("api_url"),
            sandboxURL: try req("sandbox_url"), installId: try req("install_id"), installationId: v["installation_id"]?.stringValue,
            credential: v["credential"]?.stringValue, fcmToken: v["fcm_token"]?.stringValue)
        func tpl(_ t: JSONValue) -> SimulatedTemplate? {
            guard let st = t["start_target_id"]?.stringValue, let tv = t["template_version"]?.stringValue else { return nil }
            let schema = t["schema"].flatMap { $0 == .null ? nil : $0 }
            return SimulatedTemplate(
                startTargetId: st, templateVersion: tv, bindingId: t["binding_id"]?.stringValue ?? "",
                activityType: t["activity_type"]?.stringValue ?? "", attributesType: t["attributes_type"]?.stringValue ?? "",
                schema: schema, pushToStartToken: t["push_to_start_token"]?.stringValue)
        }
        templates = (v["templates"]?.arrayValue ?? []).compactMap(tpl)
        installedTemplates = (v["installed_templates"]?.arrayValue ?? []).compactMap(tpl)
        activities = (v["activities"]?.arrayValue ?? []).compactMap { a -> SimulatedActivity? in
            guard let id = a["target_id"]?.stringValue else { return nil }
            var s = SimulatedActivity(
                targetId: id, activityType: a["activity_type"]?.stringValue ?? "", origin: a["origin"]?.stringValue ?? "remote",
                templateVersion: a["template_version"]?.stringValue, businessKey: a["business_key"]?.stringValue,
                state: a["state"] ?? .object([:]), revision: a["revision"]?.intValue, timestamp: a["timestamp"]?.intValue ?? 0,
                phase: a["phase"]?.stringValue.flatMap(SimulatedActivity.Phase.init(rawValue:)) ?? .active)
            s.updateToken = a["update_token"]?.stringValue
            if let al = a["alert"]?.objectValue {
                s.alert = DeviceAlert(title: al["title"]?.stringValue ?? "", body: al["body"]?.stringValue ?? "")
            }
            s.staleDate = a["stale_date"]?.intValue
            s.relevanceScore = a["relevance_score"]?.doubleValue
            s.endedAt = a["ended_at"]?.intValue
            s.dismissAt = a["dismiss_at"]?.intValue
            s.placeholder = a["placeholder"]?.stringValue
            s.channelId = a["channel_id"]?.stringValue
            return s
        }
        cursors = (v["cursors"]?.objectValue ?? [:]).compactMapValues { $0.intValue.map(Int.init) }
        sandboxRunId = v["sandbox_run_id"]?.stringValue
        osVersion = v["os_version"]?.stringValue
    }
}

/// Indented JSON text (for files people read); keys sorted.
func prettyJSON(_ v: JSONValue, indent: String = "") -> String {
    let inner = indent + "  "
    switch v {
    case .object(let o) where !o.isEmpty:
        let keys = o.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        return "{\n"
            + keys.map { k in inner + JSONValue.string(k).jsonString + ": " + prettyJSON(o[k]!, indent: inner) }
            .joined(separator: ",\n") + "\n" + indent + "}"
    case .array(let a) where !a.isEmpty:
        return "[\n" + a.map { inner + prettyJSON($0, indent: inner) }.joined(separator: ",\n") + "\n" + indent + "]"
    default:
        return v.jsonString
    }
}
