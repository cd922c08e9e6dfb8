import Foundation
import JSON

/// `liverelay remote …`: a client of the sender API for scripts (docs/configuration.md). The credential comes
/// from `LIVERELAY_KEY`, the base URL from `LIVERELAY_URL` (default `http://127.0.0.1:8080`).
/// Flags are the docs/write-semantics.md field names in kebab-case. The response JSON goes to stdout; an API
/// error's code and message go to stderr.
///
/// Exit status: 0 success, 2 usage error, 3 API error (any HTTP status ≥ 400), 4 network error
/// (connection refused, timeout, unreadable response).
public enum RemoteCommand {
    static let usage = """
        usage: liverelay remote <command> [flags]

        A client of the LiveRelay sender API for scripts. Credential: LIVERELAY_KEY (a sender key,
        or a master key for metadata reads and stateless ends). Server: LIVERELAY_URL (default
        http://127.0.0.1:8080). Prints the response JSON on stdout; on an API error prints
        "CODE (HTTP status): message" (then details and request id) on stderr.

        commands:
          capabilities                          GET  /v1/remote-updates/capabilities
          targets list [--status S] [--business-key K] [--installation-id I] [--start-target-id ST]
                       [--limit N] [--cursor C] [--all]
                                                GET  /v1/remote-updates/live-activities/targets
                                                (--all follows next_cursor and prints every page's data
                                                as one {"data": [...], "next_cursor": null})
          target get --target-id T [--wait-until-ready-ms MS]
                                                GET  …/targets/{T}   (409 TOKEN_PENDING when not ready in time)
          target operations --target-id T [--limit N] [--cursor C] [--all]
                                                GET  …/targets/{T}/operations
          snapshot --target-id T                GET  …/targets/{T}/snapshot
          start --start-target-id ST --template-version TV (--state JSON | --state-file FILE)
                --alert-title TITLE --alert-body BODY [--alert-sound SOUND]
                [--business-key K --business-generation G] [--stale-at TIME] [--relevance-score X]
                [--priority 5|10] [--expires-at TIME] [--idempotency-key KEY] [--wait-ms MS]
                                                POST /v1/remote-updates/live-activities/start
          update --target-id T (--state JSON | --state-file FILE) --expected-revision N
                [--source-version N] [--stale-at TIME] [--relevance-score X] [--priority 5|10]
                [--alert-title TITLE --alert-body BODY [--alert-sound SOUND]] [--expires-at TIME]
                [--idempotency-key KEY] [--wait-ms MS]
                                                POST /v1/remote-updates/live-activities/update
          end --target-id T [(--state JSON | --state-file FILE) --expected-revision N]
                [--dismiss-at TIME] [--expires-at TIME] [--idempotency-key KEY] [--wait-ms MS]
                                                POST /v1/remote-updates/live-activities/end
          operation get --operation-id OP       GET  /v1/remote-updates/operations/{OP}
          usage                                 GET  /v1/remote-updates/usage
          events list [--type TYPE] [--target-id T] [--channel-id CH] [--limit N] [--cursor C] [--all]
                                                GET  /v1/events   (master key; last 30 days, newest first)
          events get --event-id EVT             GET  /v1/events/{EVT}
          channels create --app-id A --environment sandbox|production --activity-type T
                --attributes-type X [--storage-policy none|most_recent] [--label L]
                [--schema JSON | --schema-file FILE] [--idempotency-key KEY]
                                                POST /v1/remote-updates/channels   (master key)
          channels list [--limit N] [--cursor C] [--all]
                                                GET  /v1/remote-updates/channels
          channels get --channel-id CH          GET  …/channels/{CH}
          channels update --channel-id CH (--state JSON | --state-file FILE) --expected-revision N
                [--alert-title TITLE --alert-body BODY [--alert-sound SOUND]] [--stale-at TIME]
                [--relevance-score X] [--priority 10|5|1] [--expires-at TIME] [--idempotency-key KEY]
                                                POST …/channels/{CH}/update
          channels end --channel-id CH [(--state JSON | --state-file FILE) --expected-revision N]
                [--dismiss-at TIME] [--idempotency-key KEY]
                                                POST …/channels/{CH}/end

        Writes without --idempotency-key use a new UUID, printed to stderr as "idempotency_key: …"
        (repeat the command with it to retry safely). Times are RFC 3339 (2026-10-18T13:00:00.000Z).
        The id of `target get|operations`, `snapshot`, `operation get` and `channels get|update|end`
        may also be given as the only positional argument. `--flag=value` works too.

        exit status: 0 ok, 2 usage error, 3 API error, 4 network error
        """

    /// Runs `args` (after `remote`) and returns the exit status.
    public static func main(_ args: [String], env: [String: String] = ProcessInfo.processInfo.environment) -> Int32 {
        do {
            _ = try commandName(args)  // an unknown command is reported before a missing LIVERELAY_KEY
            let client = try RemoteClient(env: env)
            return try run(args, client: client)
        } catch let e as RemoteUsageError {
            stderr("liverelay remote: \(e.message)\nsee `liverelay remote --help`")
            return 2
        } catch let e as RemoteAPIError {
            stderr(e.report)
            return 3
        } catch let e as RemoteNetworkError {
            stderr("liverelay remote: network error: \(e.message)")
            return 4
        } catch {
            stderr("liverelay remote: \(error)")
            return 4
        }
    }

    static func stderr(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

    static func stdout(_ v: JSONValue) { FileHandle.standardOutput.write(Data(v.serialized() + [0x0A])) }

    /// Every command `run` knows, as written on the command line ("targets list", …).
    static let commands: [String] = [
        "capabilities", "usage", "targets list", "target get", "target operations", "snapshot",
        "start", "update", "end", "operation get", "events list", "events get",
        "channels create", "channels list", "channels get", "channels update", "channels end"
    ]

    /// The command named by `args` ("target get" for `target get --target-id …`).
    /// - Throws: `RemoteUsageError` naming an unknown or incomplete command.
    static func commandName(_ args: [String]) throws -> String {
        guard let first = args.first else { throw RemoteUsageError("missing command") }
        var command = first
        if ["targets", "target", "operation", "events", "channels"].contains(first) {
            guard args.count > 1, !args[1].hasPrefix("-") else { throw RemoteUsageError("\(first) needs a subcommand") }
            command += " " + args[1]
        }
        guard commands.contains(command) else { throw RemoteUsageError("unknown command \(command.debugDescription)") }
        return command
    }

    static func run(_ args: [String], client: RemoteClient) throws -> Int32 {
        guard let first = args.first else { throw RemoteUsageError("missing command") }
        var rest = Array(args.dropFirst())
        var command = first
        if ["targets", "target", "operation", "events", "channels"].contains(first) {
            guard !rest.isEmpty else { throw RemoteUsageError("\(first) needs a subcommand") }
            command += " " + rest.removeFirst()
        }
        var f = try Flags(rest)
        let out: JSONValue
        switch command {
        case "capabilities":
            try f.finish()
            out = try client.get("/v1/remote-updates/capabilities")
        case "usage":
            try f.finish()
            out = try client.get("/v1/remote-updates/usage")
        case "targets list":
            var q: [(String, String)] = []
            for flag in ["status", "business-key", "installation-id", "start-target-id"] {
                if let v = f.string(flag) { q.append((flag.replacingOccurrences(of: "-", with: "_"), v)) }
            }
            out = try list("/v1/remote-updates/live-activities/targets", query: q, flags: &f, client: client)
        case "target get":
            let id = try f.id("target-id")
            var q: [(String, String)] = []
            if let w = try f.int("wait-until-ready-ms") { q.append(("wait_until_ready_ms", String(w))) }
            try f.finish()
            out = try client.get(
                "/v1/remote-updates/live-activities/targets/\(escape(id))", query: q,
                timeout: Double(q.isEmpty ? 0 : 60) + 30)
        case "target operations":
            let id = try f.id("target-id")
            out = try list("/v1/remote-updates/live-activities/targets/\(escape(id))/operations", query: [], flags: &f, client: client)
        case "snapshot":
            let id = try f.id("target-id")
            try f.finish()
            out = try client.get("/v1/remote-updates/live-activities/targets/\(escape(id))/snapshot")
        case "operation get":
            let id = try f.id("operation-id")
            try f.finish()
            out = try client.get("/v1/remote-updates/operations/\(escape(id))")
        case "events list":
            var q: [(String, String)] = []
            for flag in ["type", "target-id", "channel-id"] {
                if let v = f.string(flag) { q.append((flag.replacingOccurrences(of: "-", with: "_"), v)) }
            }
            out = try list("/v1/events", query: q, flags: &f, client: client)
        case "events get":
            let id = try f.id("event-id")
            try f.finish()
            out = try client.get("/v1/events/\(escape(id))")
        case "channels create":
            var o: [String: JSONValue] = [:]
            for flag in ["app-id", "environment", "activity-type", "attributes-type"] {
                o[flag.replacingOccurrences(of: "-", with: "_")] = .string(try f.required(flag))
            }
            if let p = f.string("storage-policy") { o["storage_policy"] = .string(p) }
            if let l = f.string("label") { o["label"] = .string(l) }
            if let schema = try f.json("schema") { o["schema"] = schema }
            o["idempotency_key"] = .string(idempotencyKey(&f))
            try f.finish()
            out = try client.send("POST", "/v1/remote-updates/channels", query: [], body: .object(o), timeout: 60)
        case "channels list":
            out = try list("/v1/remote-updates/channels", query: [], flags: &f, client: client)
        case "channels get":
            let id = try f.id("channel-id")
            try f.finish()
            out = try client.get("/v1/remote-updates/channels/\(escape(id))")
        case "channels update", "channels end":
            let id = try f.id("channel-id")
            let (body, _) = try writeBody(command, &f)
            try f.finish()
            let verb = command == "channels update" ? "update" : "end"
            out = try client.send("POST", "/v1/remote-updates/channels/\(escape(id))/\(verb)", query: [], body: body, timeout: 60)
        case "start", "update", "end":
            let (body, waitMs) = try writeBody(command, &f)
            try f.finish()
            var q: [(String, String)] = []
            if let waitMs { q.append(("wait_ms", String(waitMs))) }
            out = try client.send(
                "POST", "/v1/remote-updates/live-activities/\(command)", query: q, body: body,
                timeout: Double(waitMs ?? 0) / 1000 + 30)
        default:
            throw RemoteUsageError("unknown command \(command.debugDescription)")
        }
        stdout(out)
        return 0
    }

    /// One page, or every page with `--all`.
    static func list(_ path: String, query: [(String, String)], flags f: inout Flags, client: RemoteClient) throws -> JSONValue {
        var q = query
        if let l = try f.int("limit") { q.append(("limit", String(l))) }
        let all = f.bool("all")
        var cursor = f.string("cursor")
        try f.finish()
        guard all else {
            if let cursor { q.append(("cursor", cursor)) }
            return try client.get(path, query: q)
        }
        var data: [JSONValue] = []
        var pages = 0
        repeat {
            var pq = q
            if let c = cursor { pq.append(("cursor", c)) }
            let page = try client.get(path, query: pq)
            data += page["data"]?.arrayValue ?? []
            cursor = page["next_cursor"]?.stringValue
            pages += 1
        } while cursor != nil && pages < 100_000
        return .object(["data": .array(data), "next_cursor": .null])
    }

    /// The body of start/update/end (and of `channels update|end`, docs/channels.md: the same
    /// fields without `target_id`; a channel end takes no `expires_at`) from the flags
    /// (docs/write-semantics.md field names) and `--wait-ms` (not for channels).
    static func writeBody(_ kind: String, _ f: inout Flags) throws -> (JSONValue, Int64?) {
        var o: [String: JSONValue] = [:]
        func put(_ flag: String, _ value: JSONValue?) { if let value { o[flag.replacingOccurrences(of: "-", with: "_")] = value } }
        let state = try f.state()
        switch kind {
        case "start":
            put("start-target-id", try .string(f.required("start-target-id")))
            put("template-version", try .string(f.required("template-version")))
            guard let state else { throw RemoteUsageError("start needs --state JSON or --state-file FILE") }
            o["state"] = state
            put("business-key", f.string("business-key").map(JSONValue.string))
            put("business-generation", f.string("business-generation").map(JSONValue.string))
        case "update", "channels update":
            if kind == "update" { put("target-id", try .string(f.required("target-id"))) }
            guard let state else { throw RemoteUsageError("update needs --state JSON or --state-file FILE") }
            o["state"] = state
            guard let rev = try f.int("expected-revision") else { throw RemoteUsageError("update needs --expected-revision N") }
            o["expected_revision"] = .int(rev)
            if kind == "update" { put("source-version", try f.int("source-version").map(JSONValue.int)) }
        default:  // end, channels end
            if kind == "end" { put("target-id", try .string(f.required("target-id"))) }
            if let state { o["state"] = state }
            put("expected-revision", try f.int("expected-revision").map(JSONValue.int))
            put("dismiss-at", f.string("dismiss-at").map(JSONValue.string))
        }
        if kind != "end" && kind != "channels end" {
            put("stale-at", f.string("stale-at").map(JSONValue.string))
            put("relevance-score", try f.double("relevance-score").map(JSONValue.double))
            put("priority", try f.int("priority").map(JSONValue.int))
            let title = f.string("alert-title"), body = f.string("alert-body"), sound = f.string("alert-sound")
            if title != nil || body != nil || sound != nil {
                guard let title, let body else { throw RemoteUsageError("--alert-title and --alert-body go together") }
                var a: [String: JSONValue] = ["title": .string(title), "body": .string(body)]
                if let sound { a["sound"] = .string(sound) }
                o["alert"] = .object(a)
            }
        }
        if kind != "channels end" { put("expires-at", f.string("expires-at").map(JSONValue.string)) }
        o["idempotency_key"] = .string(idempotencyKey(&f))
        return (.object(o), kind.hasPrefix("channels") ? nil : try f.int("wait-ms"))
    }

    /// `--idempotency-key`, else a new UUID printed to stderr as `idempotency_key: …`.
    static func idempotencyKey(_ f: inout Flags) -> String {
        if let k = f.string("idempotency-key") { return k }
        let key = UUID().uuidString.lowercased()
        stderr("idempotency_key: \(key)")
        return key
    }

    /// Percent-encodes one path segment.
    static func escape(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }
}

/// `--name value` / `--name=value` / `--flag` parsing with a check that every flag was used.
struct Flags {
    private var values: [String: String] = [:]
    private var switches: Set<String> = []
    private var positional: [String] = []
    private var used: Set<String> = []
    static let booleans: Set<String> = ["all"]

    init(_ args: [String]) throws {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a.hasPrefix("--") {
                let body = String(a.dropFirst(2))
                if let eq = body.firstIndex(of: "=") {
                    values[String(body[..<eq])] = String(body[body.index(after: eq)...])
                } else if Self.booleans.contains(body) {
                    switches.insert(body)
                } else {
                    guard i + 1 < args.count else { throw RemoteUsageError("\(a) needs a value") }
                    if values[body] != nil { throw RemoteUsageError("\(a) given twice") }
                    values[body] = args[i + 1]
                    i += 1
                }
            } else {
                positional.append(a)
            }
            i += 1
        }
    }

    mutating func string(_ name: String) -> String? {
        used.insert(name)
        return values[name]
    }

    mutating func required(_ name: String) throws -> String {
        guard let v = string(name), !v.isEmpty else { throw RemoteUsageError("--\(name) is required") }
        return v
    }

    mutating func bool(_ name: String) -> Bool {
        used.insert(name)
        if let v = values[name] { return v == "true" || v == "1" }
        return switches.contains(name)
    }

    mutating func int(_ name: String) throws -> Int64? {
        guard let s = string(name) else { return nil }
        guard let v = Int64(s) else { throw RemoteUsageError("--\(name) must be an integer, got \(s.debugDescription)") }
        return v
    }

    mutating func double(_ name: String) throws -> Double? {
        guard let s = string(name) else { return nil }
        guard let v = Double(s), v.isFinite else { throw RemoteUsageError("--\(name) must be a number, got \(s.debugDescription)") }
        return v
    }

    /// `--name ID` or the only positional argument.
    mutating func id(_ name: String) throws -> String {
        if let v = string(name) {
            guard !v.isEmpty else { throw RemoteUsageError("--\(name) must not be empty") }
            return v
        }
        guard positional.count == 1 else { throw RemoteUsageError("--\(name) is required") }
        return positional.removeFirst()
    }

    /// `--state JSON` or `--state-file FILE` (`-` = stdin), parsed as JSON.
    mutating func state() throws -> JSONValue? { try json("state") }

    /// `--NAME JSON` or `--NAME-file FILE` (`-` = stdin), parsed as JSON; nil when neither.
    mutating func json(_ name: String) throws -> JSONValue? {
        let inline = string(name), file = string(name + "-file")
        if inline != nil && file != nil { throw RemoteUsageError("give --\(name) or --\(name)-file, not both") }
        var text: [UInt8]
        if let inline {
            text = Array(inline.utf8)
        } else if let file {
            if file == "-" {
                text = Array(FileHandle.standardInput.readDataToEndOfFile())
            } else {
                guard let d = FileManager.default.contents(atPath: file) else { throw RemoteUsageError("cannot read --\(name)-file \(file)") }
                text = Array(d)
            }
        } else {
            return nil
        }
        do { return try JSONValue.parse(text) } catch {
            throw RemoteUsageError("--\(name)\(file == nil ? "" : "-file") is not valid JSON: \(error)")
        }
    }

    /// Throws for any flag or positional argument nobody read.
    func finish() throws {
        if let bad = (Set(values.keys).union(switches)).subtracting(used).sorted().first { throw RemoteUsageError("unknown flag --\(bad)") }
        if let p = positional.first { throw RemoteUsageError("unexpected argument \(p.debugDescription)") }
    }
}

struct RemoteUsageError: Error {
    let message: String
    init(_ m: String) { message = m }
}

struct RemoteNetworkError: Error {
    let message: String
}

/// An HTTP answer ≥ 400: the envelope's code and message (docs/http-conventions.md).
struct RemoteAPIError: Error {
    let status: Int
    let code: String
    let message: String
    let details: JSONValue?
    let requestId: String?

    var report: String {
        var s = "\(code) (HTTP \(status)): \(message)"
        if let details, details.objectValue?.isEmpty == false { s += "\ndetails: \(details.jsonString)" }
        if let requestId { s += "\nrequest_id: \(requestId)" }
        return s
    }
}
