import Foundation
import JSON

/// `liverelay simulate-device`: one installation of an app, acting as ActivityKit (iOS) or an
/// Android 16 Live Updates app with a LiveRelay SDK would, against a LiveRelay API and the local
/// sandbox. State lives in a small JSON file so successive invocations continue.
enum SimulateDeviceCommand {
    static let usage = """
        usage: liverelay simulate-device <task> [options]

        Acts as ONE installation of an app the way ActivityKit (iOS) or an Android 16 Live Updates app
        with a LiveRelay SDK would: registers, prepares templates, receives the pushes the local sandbox
        recorded for its tokens and prints what the lock screen shows after each event. Its state
        (installation credential, tokens, templates, activities) is kept in a JSON file, so each
        invocation continues where the last one stopped.

        tasks:
          register     register the installation with a publishable key (Android: also its FCM token)
            --platform ios|android     required
            --app-id ID                bundle id / package name (required), e.g. com.example.delivery
            --publishable-key KEY      lrp_… (default: $LIVERELAY_PUBLISHABLE_KEY)
            --url URL                  LiveRelay API (default: $LIVERELAY_URL or http://127.0.0.1:8080)
            --sandbox-url URL          sandbox control endpoint (default: $LIVERELAY_SANDBOX_CONTROL_URL
                                       or http://127.0.0.1:8444)
            --environment ENV          sandbox|production (default sandbox)
            --install-id UUID          the app's install id (default: a new random UUID; registering
                                       again with the same one keeps the installation)
            --fcm-token TOKEN          Android: the FCM token to register (default: a generated one)
            --os-version V             the OS version to report (os_version), e.g. 18.2: iOS 18 or
                                       later receives channel starts with input-push-channel
            --force                    overwrite an existing state file (a new device)
          prepare      prepare a template and (iOS) register a push-to-start token; prints
                       {"start_target_id", "template_version", "status", …}
            --template FILE            a JSON prepare body: binding_id, activity_type, attributes_type,
                                       renderer_digest, schema, sample_state, resources, bundle
                                       (e.g. deploy/demo/delivery-template.json)
          run          receive pushes: reads the sandbox delivery log for the device's tokens and applies
                       them in order (start creates the activity and registers its update token, or
                       subscribes it to the channel of input-push-channel; update applies a newer,
                       schema-valid content-state; end ends it and honours the dismissal date;
                       broadcasts of a subscribed channel update/end its activities); prints the lock
                       screen after each event
            --once                     read once and exit (default: keep polling)
            --timeout S                stop after S seconds (default: until Ctrl-C)
            --interval S               seconds between reads of the delivery log (default 0.5)
          local-start  start an activity on the device and reserve it remotely (local start with
                       remote updates), then (iOS) register its update token
            --activity-type TYPE       default: the activity type of the only prepared template
            --business-key KEY         required, e.g. delivery:42
            --business-generation G    required, e.g. 1
            --state JSON               required, e.g. '{"message":"Preparing"}'
            --idempotency-key KEY      default: <business key>:start:<generation>
            --channel-id CH            iOS 18: start with pushType .channel: reserve into LiveRelay
                                       channel CH (channel_id) and receive its broadcasts
            --apns-channel-id ID       the channel's apns_channel_id (default: from the answer)
          show         print the lock screen and the device's ids (no network)

        options for every task:
          --name NAME                  device name: the state file is ./.liverelay/device-NAME.json
                                       (default "default"; the same rule for every task, so a second
                                       device needs --name on each of its commands)
          --state-file PATH            the state file itself (overrides --name)

        Exit status: 0 success, 1 failure (the API error is printed), 2 usage error.
        """

    static func run(_ args: [String]) throws {
        guard let task = args.first, !task.hasPrefix("-") else { throw UsageError("missing task (register, prepare, run, local-start, show)") }
        let opts = try UsageError.options(Array(args.dropFirst()), flags: ["once", "force"])
        let env = ProcessInfo.processInfo.environment
        let out: @Sendable (String) -> Void = emit

        // One rule for every task: --state-file, else ./.liverelay/device-<--name or "default">.json.
        let file = stateFile(opts)
        func load() throws -> DeviceSimulatorRunner {
            guard FileManager.default.fileExists(atPath: file.path) else {
                throw UsageError(
                    "no device \(deviceName(opts).debugDescription) (\(file.path) does not exist); run `liverelay simulate-device register`"
                        + (opts["name"] == nil && opts["state-file"] == nil ? "" : " with the same --name/--state-file") + " first")
            }
            return try DeviceSimulatorRunner.load(stateFile: file, output: out)
        }

        switch task {
        case "register":
            try check(
                opts,
                [
                    "platform", "app-id", "publishable-key", "url", "sandbox-url", "environment", "install-id", "fcm-token", "force",
                    "name", "state-file", "os-version"
                ])
            guard let p = opts["platform"], let platform = DevicePlatform(rawValue: p) else { throw UsageError("--platform ios|android is required") }
            guard let appId = opts["app-id"], !appId.isEmpty else { throw UsageError("--app-id is required (bundle id / package name)") }
            guard let key = opts["publishable-key"] ?? env["LIVERELAY_PUBLISHABLE_KEY"], !key.isEmpty else {
                throw UsageError("--publishable-key (or LIVERELAY_PUBLISHABLE_KEY) is required")
            }
            let environment = opts["environment"] ?? "sandbox"
            guard ["sandbox", "production"].contains(environment) else { throw UsageError("--environment must be sandbox or production") }
            var state: DeviceSimulatorState
            if FileManager.default.fileExists(atPath: file.path), opts["force"] == nil {
                // Registering again continues the same device (same install id → same installation).
                state = try DeviceSimulatorRunner.load(stateFile: file, output: out).state
                guard state.platform == platform, state.appId == appId else {
                    throw UsageError("\(file.path) is a \(state.platform.rawValue) device of \(state.appId); use another --name or --force")
                }
            } else {
                if let id = opts["install-id"], UUID(uuidString: id) == nil { throw UsageError("--install-id must be a UUID") }
                state = DeviceSimulatorState(
                    platform: platform, appId: appId, environment: environment,
                    apiURL: trimmed(opts["url"] ?? env["LIVERELAY_URL"] ?? "http://127.0.0.1:8080"),
                    sandboxURL: trimmed(opts["sandbox-url"] ?? env["LIVERELAY_SANDBOX_CONTROL_URL"] ?? "http://127.0.0.1:8444"),
                    installId: opts["install-id"] ?? UUID().uuidString.lowercased(), fcmToken: opts["fcm-token"])
            }
            if let v = opts["os-version"] {
                guard v.split(separator: ".").allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isNumber) }), !v.isEmpty else {
                    throw UsageError("--os-version must look like 18.2")
                }
                state.osVersion = v
            }
            if let u = opts["url"] { state.apiURL = trimmed(u) }
            if let u = opts["sandbox-url"] { state.sandboxURL = trimmed(u) }
            let runner = DeviceSimulatorRunner(state: state, stateFile: file, output: out)
            let inst = try runner.register(publishableKey: key)
            emit(
                prettyJSON(
                    .object([
                        "installation_id": inst["installation_id"] ?? .null, "platform": .string(platform.rawValue),
                        "app_id": .string(appId), "fcm_token_registered": inst["fcm_token_registered"] ?? .bool(false),
                        "state_file": .string(file.path)
                    ])))
        case "prepare":
            try check(opts, ["template", "name", "state-file"])
            guard let path = opts["template"] else { throw UsageError("--template FILE is required") }
            guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read \(path)") }
            let template: JSONValue
            do { template = try JSONValue.parse(Array(data)) } catch { throw UsageError("\(path) is not JSON: \(error)") }
            let runner = try load()
            emit(prettyJSON(try runner.prepare(template: template)))
        case "run":
            try check(opts, ["once", "timeout", "interval", "name", "state-file"])
            let timeout = try opts["timeout"].map { s -> Double in
                guard let v = Double(s), v > 0 else { throw UsageError("--timeout must be a positive number of seconds") }
                return v
            }
            let interval =
                try opts["interval"].map { s -> Double in
                    guard let v = Double(s), v >= 0.01, v <= 60 else { throw UsageError("--interval must be 0.01…60 seconds") }
                    return v
                } ?? 0.5
            let runner = try load()
            let s = runner.state
            out(
                "device \(s.installationId ?? "(unregistered)") (\(s.platform.rawValue), \(s.appId)) reading \(s.sandboxURL)/sandbox/deliveries"
                    + (opts["once"] != nil ? " once" : "; Ctrl-C stops"))
            if opts["once"] == nil {
                Foundation.signal(SIGINT, SIG_IGN)
                Foundation.signal(SIGTERM, SIG_IGN)
                for sig in [SIGINT, SIGTERM] {
                    let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
                    src.setEventHandler { runner.stop() }
                    src.resume()
                    signalSources.append(src)
                }
            }
            runner.run(once: opts["once"] != nil, timeout: timeout, interval: interval)
            if opts["once"] != nil, let e = runner.lastError { throw SimulatorFailure(message: e) }
        case "local-start":
            try check(
                opts,
                [
                    "activity-type", "business-key", "business-generation", "state", "idempotency-key", "name", "state-file",
                    "channel-id", "apns-channel-id"
                ])
            guard let bk = opts["business-key"], !bk.isEmpty else { throw UsageError("--business-key is required") }
            guard let bg = opts["business-generation"], !bg.isEmpty else { throw UsageError("--business-generation is required") }
            guard let stateText = opts["state"] else { throw UsageError("--state JSON is required") }
            let st: JSONValue
            do { st = try JSONValue.parse(stateText) } catch { throw UsageError("--state is not JSON: \(error)") }
            let runner = try load()
            let types = Set(runner.state.templates.map(\.activityType))
            guard let type = opts["activity-type"] ?? (types.count == 1 ? types.first : nil) else {
                throw UsageError("--activity-type is required (prepared: \(types.sorted().joined(separator: ", ")))")
            }
            let t = try runner.localStart(
                activityType: type, businessKey: bk, businessGeneration: bg, state: st,
                idempotencyKey: opts["idempotency-key"], channelId: opts["channel-id"],
                apnsChannelId: opts["apns-channel-id"])
            emit(
                prettyJSON(
                    .object([
                        "target_id": t["id"] ?? .null, "status": t["status"] ?? .null, "revision": t["revision"] ?? .null,
                        "business_key": .string(bk), "business_generation": .string(bg)
                    ])))
        case "show":
            try check(opts, ["name", "state-file"])
            let runner = try load()
            let s = runner.state
            emit("device \(s.installationId ?? "(unregistered)") (\(s.platform.rawValue), \(s.appId), \(s.environment)) → \(s.apiURL)")
            for t in s.templates {
                emit(
                    "  start target \(t.startTargetId)  \(t.activityType)  \(t.templateVersion)"
                        + (t.pushToStartToken != nil ? "  push-to-start token registered" : ""))
            }
            emit(runner.lockScreen)
        default:
            throw UsageError("unknown task \(task.debugDescription)")
        }
    }

    /// The device name every task uses: `--name`, else `default`.
    static func deviceName(_ opts: [String: String]) -> String { opts["name"] ?? "default" }

    /// The state file every task uses: `--state-file PATH`, else
    /// `./.liverelay/device-<deviceName>.json` (relative to the working directory).
    static func stateFile(_ opts: [String: String]) -> URL {
        if let p = opts["state-file"] { return URL(fileURLWithPath: p).standardizedFileURL }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            .appendingPathComponent(".liverelay/device-\(deviceName(opts)).json")
    }

    /// Writes `line` and a newline to stdout at once (an unbuffered `write(2)`), so output piped
    /// into a file or `tee` appears line by line while `run` keeps polling.
    @Sendable static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    nonisolated(unsafe) static var signalSources: [DispatchSourceSignal] = []

    struct SimulatorFailure: Error, CustomStringConvertible { let message: String; var description: String { message } }

    static func trimmed(_ url: String) -> String { url.hasSuffix("/") ? String(url.dropLast()) : url }

    static func check(_ opts: [String: String], _ allowed: Set<String>) throws {
        if let bad = opts.keys.sorted().first(where: { !allowed.contains($0) }) { throw UsageError("unknown option --\(bad)") }
    }
}
