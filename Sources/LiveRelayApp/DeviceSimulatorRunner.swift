import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Crypto
import JSON
import LiveRelayCore

/// A LiveRelay API (or sandbox control) answer that is not 2xx.
public struct DeviceAPIError: Error, CustomStringConvertible {
    public let status: Int
    public let code: String?
    public let body: JSONValue
    public let context: String
    public var description: String {
        let msg = body["error"]?["message"]?.stringValue ?? (status <= 0 ? "no answer" : String(body.jsonString.prefix(300)))
        return "\(context): HTTP \(status)\(code.map { " \($0)" } ?? ""): \(msg)"
    }
}

/// Blocking JSON over HTTP/1.1 (URLSession), for the simulator's few calls.
struct DeviceHTTP {
    var timeoutSeconds: Double = 30

    func call(_ method: String, _ url: String, body: JSONValue? = nil, bearer: String? = nil, context: String) throws -> (Int, JSONValue) {
        guard let u = URL(string: url) else { throw DeviceAPIError(status: 0, code: nil, body: .null, context: "\(context): bad URL \(url)") }
        var req = URLRequest(url: u, timeoutInterval: timeoutSeconds)
        req.httpMethod = method
        if let bearer { req.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let body {
            req.httpBody = Data(body.serialized())
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox()
        URLSession.shared.dataTask(with: req) { data, resp, err in
            box.set(((resp as? HTTPURLResponse)?.statusCode ?? -1, data.map { Array($0) } ?? [], err.map { "\($0.localizedDescription)" }))
            done.signal()
        }.resume()
        done.wait()
        let (status, bytes, err) = box.get()
        let json = (try? JSONValue.parse(bytes)) ?? .null
        if status < 0 {
            throw DeviceAPIError(status: status, code: nil, body: .null, context: "\(context): \(method) \(url) failed (\(err ?? "no answer"))")
        }
        return (status, json)
    }

    /// `call` that throws `DeviceAPIError` unless 2xx.
    func ok(_ method: String, _ url: String, body: JSONValue? = nil, bearer: String? = nil, context: String) throws -> JSONValue {
        let (s, v) = try call(method, url, body: body, bearer: bearer, context: context)
        guard (200..<300).contains(s) else { throw DeviceAPIError(status: s, code: v["error"]?["code"]?.stringValue, body: v, context: context) }
        return v
    }

    final class ResultBox: @unchecked Sendable {  // set once before the semaphore, read after
        private var value: (Int, [UInt8], String?) = (-1, [], nil)
        private let lock = NSLock()
        func set(_ v: (Int, [UInt8], String?)) { lock.lock(); value = v; lock.unlock() }
        func get() -> (Int, [UInt8], String?) { lock.lock(); defer { lock.unlock() }; return value }
    }
}

/// The I/O side of `simulate-device`: talks to the LiveRelay API as the app's SDK would, reads
/// the sandbox's delivery log for the device's tokens, feeds the pushes to `DeviceSimulator`,
/// carries out its effects (update-token registration), saves the state file and prints what
/// the lock screen shows after each event. Thread-safe: `startBackground` runs the poll loop on
/// its own thread while others read `state` or `waitFor` a condition (woken after every poll).
public final class DeviceSimulatorRunner: @unchecked Sendable {  // `sim` and `stopped` only under `cond`
    private var sim: DeviceSimulator
    public let stateFile: URL?
    let output: @Sendable (String) -> Void
    let now: @Sendable () -> Date
    let http = DeviceHTTP()
    private let cond = NSCondition()
    private var stopped = false
    private var thread: Thread?
    private var polls = 0
    /// The last poll's error (background loop), for diagnostics.
    public private(set) var lastError: String?

    public init(
        state: DeviceSimulatorState, stateFile: URL?, now: @escaping @Sendable () -> Date = Date.init,
        output: @escaping @Sendable (String) -> Void
    ) {
        sim = DeviceSimulator(state: state)
        self.stateFile = stateFile
        self.now = now
        self.output = output
    }

    /// Loads the state file written by an earlier invocation.
    public static func load(stateFile: URL, output: @escaping @Sendable (String) -> Void) throws -> DeviceSimulatorRunner {
        guard let data = FileManager.default.contents(atPath: stateFile.path) else {
            throw DeviceSimulatorState.Invalid(description: "no device state at \(stateFile.path); run `liverelay simulate-device register` first")
        }
        let state = try DeviceSimulatorState(json: try JSONValue.parse(Array(data)))
        return DeviceSimulatorRunner(state: state, stateFile: stateFile, output: output)
    }

    /// A copy of the device state.
    public var state: DeviceSimulatorState { cond.lock(); defer { cond.unlock() }; return sim.state }

    /// What the lock screen shows now.
    public var lockScreen: String { LockScreen.screen(state, now: now()) }

    /// The lock screen box of one activity (nil when the device has no such activity).
    public func lockScreen(_ targetId: String) -> String? {
        state.activity(targetId).map { LockScreen.render($0, now: now()) }
    }

    static func hexToken() -> String { SecureRandom.bytes(32).map { String(format: "%02x", $0) }.joined() }

    func save() throws {
        guard let stateFile else { return }
        try FileManager.default.createDirectory(at: stateFile.deletingLastPathComponent(), withIntermediateDirectories: true)
        let text = prettyJSON(state.json) + "\n"
        let tmp = stateFile.appendingPathExtension("tmp")
        _ = FileManager.default.createFile(atPath: tmp.path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        _ = try? FileManager.default.removeItem(at: stateFile)
        try FileManager.default.moveItem(at: tmp, to: stateFile)
    }

    private func mutate<T>(_ body: (inout DeviceSimulator) throws -> T) rethrows -> T {
        cond.lock()
        defer { cond.broadcast(); cond.unlock() }
        return try body(&sim)
    }

    func installation() throws -> (id: String, credential: String) {
        let s = state
        guard let id = s.installationId, let c = s.credential else {
            throw DeviceSimulatorState.Invalid(description: "this device is not registered; run `liverelay simulate-device register` first")
        }
        return (id, c)
    }

    // MARK: device API

    /// `POST /v1/installations` with the publishable key; Android then `PUT …/fcm-token`.
    /// Returns the installation object (without the credential).
    @discardableResult
    public func register(publishableKey: String) throws -> JSONValue {
        let s = state
        var body: [String: JSONValue] = [
            "platform": .string(s.platform.rawValue), "app_id": .string(s.appId),
            "environment": .string(s.environment), "install_id": .string(s.installId)
        ]
        if let v = s.osVersion { body["os_version"] = .string(v) }
        let v = try http.ok("POST", s.apiURL + "/v1/installations", body: .object(body), bearer: publishableKey, context: "register")
        guard let id = v["installation_id"]?.stringValue, let cred = v["credential"]?.stringValue else {
            throw DeviceAPIError(status: 200, code: nil, body: v, context: "register: no installation_id/credential in the answer")
        }
        mutate {
            $0.state.installationId = id; $0.state.credential = cred
        }
        var answer = v
        if s.platform == .android {
            let token = s.fcmToken ?? ("sim" + Self.hexToken().prefix(22) + ":APA91b" + Self.hexToken().prefix(40))
            answer = try http.ok(
                "PUT", s.apiURL + "/v1/installations/\(id)/fcm-token", body: ["token": .string(token)], bearer: cred,
                context: "register FCM token")
            mutate { $0.state.fcmToken = token }
        }
        try save()
        if case .object(var o) = answer { o.removeValue(forKey: "credential"); answer = .object(o) }
        return answer
    }

    /// Prepare (`POST …/start-targets` with the template file's body: binding, activity type,
    /// attributes type, renderer digest, schema, sample state, resources, bundle), then on iOS
    /// registers a push-to-start token (hex, as APNs tokens are). Returns
    /// `{start_target_id, template_version, status, activity_type, platform}`.
    @discardableResult
    public func prepare(template: JSONValue) throws -> JSONValue {
        let (id, cred) = try installation()
        let s = state
        let v = try http.ok("POST", s.apiURL + "/v1/installations/\(id)/start-targets", body: template, bearer: cred, context: "prepare")
        guard let st = v["start_target_id"]?.stringValue, let tv = v["template_version"]?.stringValue else {
            throw DeviceAPIError(status: 200, code: nil, body: v, context: "prepare: no start_target_id/template_version in the answer")
        }
        var t = SimulatedTemplate(
            startTargetId: st, templateVersion: tv, bindingId: template["binding_id"]?.stringValue ?? "",
            activityType: template["activity_type"]?.stringValue ?? "",
            attributesType: template["attributes_type"]?.stringValue ?? "",
            schema: template["schema"].flatMap { $0 == .null ? nil : $0 }, pushToStartToken: nil)
        var status = v["status"]?.stringValue ?? "pending"
        if s.platform == .ios {
            let token = s.templates.first(where: { $0.startTargetId == st })?.pushToStartToken ?? Self.hexToken()
            let r = try http.ok(
                "PUT", s.apiURL + "/v1/installations/\(id)/start-targets/\(st)/push-to-start-token",
                body: ["token": .string(token)], bearer: cred, context: "register push-to-start token")
            status = r["status"]?.stringValue ?? status
            t.pushToStartToken = token
        }
        mutate { $0.state.prepared(t) }
        try save()
        return .object([
            "start_target_id": .string(st), "template_version": .string(tv), "status": .string(status),
            "activity_type": .string(t.activityType), "platform": .string(s.platform.rawValue)
        ])
    }

    /// Local start: reserves the business instance (`POST …/targets`), creates the activity on
    /// the device with `state`, and on iOS registers its update token. Returns the target object
    /// the token registration answered (or the reservation's on Android). `channelId` (iOS 18,
    /// `pushType: .channel(id)`): the reservation names the LiveRelay channel (`channel_id`), the
    /// activity subscribes to `apnsChannelId` (the channel's `apns_channel_id`) and registers no
    /// update token.
    @discardableResult
    public func localStart(
        activityType: String, businessKey: String, businessGeneration: String, state st: JSONValue,
        idempotencyKey: String? = nil, extra: [String: JSONValue] = [:], channelId: String? = nil,
        apnsChannelId: String? = nil
    ) throws -> JSONValue {
        let (id, cred) = try installation()
        let s = state
        var body: [String: JSONValue] = [
            "activity_type": .string(activityType), "business_key": .string(businessKey),
            "business_generation": .string(businessGeneration), "state": st,
            "idempotency_key": .string(idempotencyKey ?? "\(businessKey):start:\(businessGeneration)")
        ]
        if let channelId { body["channel_id"] = .string(channelId) }
        for (k, v) in extra { body[k] = v }
        let target = try http.ok("POST", s.apiURL + "/v1/installations/\(id)/targets", body: .object(body), bearer: cred, context: "local start")
        guard let tgt = target["id"]?.stringValue else {
            throw DeviceAPIError(status: 200, code: nil, body: target, context: "local start: no target id in the answer")
        }
        let token = s.platform == .ios ? (s.activity(tgt)?.updateToken ?? Self.hexToken()) : nil
        var subscribe: String?
        if channelId != nil {
            guard let id = apnsChannelId ?? target["apns_channel_id"]?.stringValue else {
                throw DeviceSimulatorState.Invalid(
                    description: "reserved \(tgt) into the channel, but its apns_channel_id is unknown: pass --apns-channel-id")
            }
            subscribe = id
        }
        let ev = mutate {
            $0.localStart(
                targetId: tgt, activityType: activityType, templateVersion: target["template_version"]?.stringValue,
                businessKey: businessKey, state: st, now: now(), updateToken: token,
                channelId: subscribe)
        }
        try save()
        report(ev, header: "local start")
        guard let token = ev.registerUpdateToken else { return target }
        let registered = try http.ok(
            "PUT", s.apiURL + "/v1/installations/\(id)/targets/\(tgt)/push-token", body: ["token": .string(token)],
            bearer: cred, context: "register update token")
        output("  update token registered for \(tgt): target \(registered["status"]?.stringValue ?? "?")")
        return registered
    }

    // MARK: receiving pushes

    /// Reads the sandbox's accepted deliveries for every token of the device, applies the new
    /// ones in arrival order, registers update tokens for remote starts, removes activities
    /// whose dismissal date passed, and saves the state. Returns what happened.
    @discardableResult
    public func pollOnce() throws -> [DeviceEvent] {
        let s = state
        var pushes: [DevicePush] = []
        var runId: String?
        for (provider, token) in tokensToWatch(s) {
            var comps = URLComponents(string: s.sandboxURL + "/sandbox/deliveries")
            comps?.queryItems = [
                URLQueryItem(name: "token", value: token), URLQueryItem(name: "provider", value: provider),
                URLQueryItem(name: "accepted", value: "true")
            ]
            // '+' and ':' are legal in a query but some servers read '+' as a space.
            let url = (comps?.url?.absoluteString ?? "").replacingOccurrences(of: "+", with: "%2B")
            let v = try http.ok("GET", url, context: "read the sandbox delivery log")
            if let r = v["run_id"]?.stringValue { runId = r }
            pushes += (v["data"]?.arrayValue ?? []).compactMap(DevicePush.init(sandboxDelivery:))
        }
        let (cursors, restarted) = DeviceSimulator.cursors(s.cursors, recordedRun: s.sandboxRunId, currentRun: runId)
        if let runId, runId != s.sandboxRunId {
            mutate { sim in
                sim.state.cursors = cursors
                sim.state.sandboxRunId = runId
            }
            if restarted { output("sandbox restarted (run \(runId)): reading its delivery log from the start") }
            try save()
        }
        let pending = DeviceSimulator.pending(pushes, cursors: cursors)
        var events: [DeviceEvent] = []
        for p in pending {
            let ev = mutate { sim -> DeviceEvent in
                let e = sim.apply(p, now: now(), newToken: Self.hexToken)
                sim.state.cursors[p.token] = max(sim.state.cursors[p.token] ?? 0, p.sequence)
                return e
            }
            events.append(ev)
            report(ev, header: "\(p.provider) \(eventName(p)) #\(p.sequence)")
            if let token = ev.registerUpdateToken, let tgt = ev.targetId {
                do {
                    let (id, cred) = try installation()
                    let t = try http.ok(
                        "PUT", s.apiURL + "/v1/installations/\(id)/targets/\(tgt)/push-token", body: ["token": .string(token)],
                        bearer: cred, context: "register update token")
                    output("  update token registered for \(tgt): target \(t["status"]?.stringValue ?? "?")")
                } catch {
                    output("  update token for \(tgt) NOT registered: \(error)")
                }
            }
            try save()
        }
        let dismissed = mutate { $0.tick(now: now()) }
        for ev in dismissed { report(ev, header: "dismissal date reached") }
        if !dismissed.isEmpty { try save() }
        mutate { _ in polls += 1 }
        return events + dismissed
    }

    private func tokensToWatch(_ s: DeviceSimulatorState) -> [(provider: String, token: String)] {
        DeviceSimulator(state: s).watchedTokens
    }

    private func eventName(_ p: DevicePush) -> String {
        p.payload["aps"]?["event"]?.stringValue ?? p.payload["message"]?["data"]?["event"]?.stringValue ?? "?"
    }

    func report(_ ev: DeviceEvent, header: String) {
        var line = "[\(header)] \(ev.targetId ?? "-"): \(ev.kind.rawValue)"
        if let r = ev.reason { line += " (\(r))" }
        output(line)
        if ev.kind != .ignored, let t = ev.targetId, let box = lockScreen(t) { output(box) }
    }

    /// Polls every `interval` seconds until `timeout` (nil = until `stop()`), or once.
    public func run(once: Bool, timeout: Double?, interval: Double) {
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        repeat {
            do { _ = try pollOnce(); lastError = nil } catch {
                lastError = "\(error)"
                output("poll failed: \(error)")
                if once { return }
            }
            if once { return }
            cond.lock()
            let wait = deadline.map { min($0, Date().addingTimeInterval(interval)) } ?? Date().addingTimeInterval(interval)
            if !stopped { _ = cond.wait(until: wait) }
            let stop = stopped
            cond.unlock()
            if stop { return }
        } while deadline.map { Date() < $0 } ?? true
    }

    /// Runs the poll loop on a background thread until `stop()`, reading the sandbox's
    /// delivery log every `interval` seconds (default 0.05 s, for tests).
    public func startBackground(interval: Double = 0.05) {
        let t = Thread { [self] in run(once: false, timeout: nil, interval: interval) }
        t.name = "simulate-device"
        thread = t
        t.start()
    }

    /// Ends the poll loop (`run` or `startBackground`) after its current read.
    public func stop() {
        cond.lock()
        stopped = true
        cond.broadcast()
        cond.unlock()
    }

    /// Waits (woken after every poll and local change) until `condition` holds on the device
    /// state, at most `timeout` seconds. Returns whether it held.
    public func waitFor(timeout: Double, _ condition: (DeviceSimulatorState) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        cond.lock()
        defer { cond.unlock() }
        while !condition(sim.state) {
            if !cond.wait(until: deadline) { return condition(sim.state) }
        }
        return true
    }
}
