import Foundation
import Logging
import LiveRelaySandbox

/// `liverelay sandbox`: a local APNs/FCM-compatible server for development and tests (docs/configuration.md).
enum SandboxCommand {
    static let usage = """
        usage: liverelay sandbox [--listen HOST:PORT] [--control HOST:PORT] [--dir DIR] [--advertise HOST] [--fresh]
                                 [--max-concurrent-streams N] [--token-updates-per-20min N]

        A local APNs- and FCM-compatible server: HTTP/2 over TLS with its own CA, checking requests the way
        Apple and Google document them, recording every delivery, and injecting faults on request.

          --listen HOST:PORT   APNs (POST /3/device/<token>), APNs channels (/1/apps/<bundle>/channels,
                               /1/apps/<bundle>/all-channels) and broadcasts (POST /4/broadcasts/apps/<bundle>),
                               FCM (POST /v1/projects/<p>/messages:send) and OAuth (POST /token), h2 over TLS
                                                                                     (default 127.0.0.1:8443)
          --control HOST:PORT  JSON control endpoint, plain HTTP/1.1                 (default 127.0.0.1:8444)
                               GET /sandbox/deliveries[?token=&provider=&accepted=true], GET /sandbox/stats,
                               GET|POST|DELETE /sandbox/faults, PUT /sandbox/connection-faults,
                               POST /sandbox/dead-tokens, POST /sandbox/oauth/revoke, POST /sandbox/apns-keys,
                               POST /sandbox/service-accounts, POST /sandbox/reset, GET /sandbox/info,
                               GET /sandbox/broadcasts[?channel_id=&accepted=true], GET|POST /sandbox/channels
          --dir DIR            where ca.pem, ca-key.pem, apns-key.p8, apns.json, fcm-service-account.json and env
                               are written; keys found there are reused               (default ./.liverelay/sandbox)
          --advertise HOST     host name used in token_uri and the printed URLs (default: the --listen host)
          --fresh              generate new keys even if DIR has some
          --max-concurrent-streams N   SETTINGS_MAX_CONCURRENT_STREAMS               (default 1000)
          --token-updates-per-20min N  new APNs JWTs per (team, key) within 20 min before
                                       429 TooManyProviderTokenUpdates                (default 4; Apple: 1)

        Point LiveRelay at it with the printed LIVERELAY_* lines (also in DIR/env), then register the demo
        credentials: PUT /v1/provider-credentials/apns with apns.json's team_id/key_id, apns-key.p8 and your
        bundle ids; PUT /v1/provider-credentials/fcm with fcm-service-account.json. Runs until SIGTERM/SIGINT.
        """

    static func run(_ args: [String]) throws {
        ServeCommand.prepareForTermination()  // before anything starts: an early SIGTERM is kept
        var config = SandboxConfiguration(
            directory: URL(
                fileURLWithPath: ".liverelay/sandbox",
                relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            ).standardizedFileURL)
        var rest = args[...]
        func value(_ flag: String) throws -> String {
            guard let v = rest.popFirst(), !v.hasPrefix("--") else { throw UsageError("\(flag) needs a value") }
            return v
        }
        func hostPort(_ flag: String) throws -> (String, Int) {
            let v = try value(flag)
            guard let colon = v.lastIndex(of: ":"), let p = Int(v[v.index(after: colon)...]), (0...65535).contains(p) else {
                throw UsageError("\(flag) must be HOST:PORT, got \(v.debugDescription)")
            }
            var host = String(v[..<colon])
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            return (host.isEmpty ? "127.0.0.1" : host, p)
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--listen": (config.host, config.port) = try hostPort(flag)
            case "--control": (config.controlHost, config.controlPort) = try hostPort(flag)
            case "--dir": config.directory = URL(fileURLWithPath: try value(flag)).standardizedFileURL
            case "--advertise": config.advertisedHost = try value(flag)
            case "--fresh": config.fresh = true
            case "--max-concurrent-streams":
                guard let n = Int(try value(flag)), (1...100_000).contains(n) else { throw UsageError("\(flag) must be 1…100000") }
                config.maxConcurrentStreams = n
            case "--token-updates-per-20min":
                guard let n = Int(try value(flag)), (1...1000).contains(n) else { throw UsageError("\(flag) must be 1…1000") }
                config.providerTokenUpdatesPer20Minutes = n
            default: throw UsageError("unknown option \(flag.debugDescription)")
            }
        }
        let log = Logger(minimum: .info, context: ["component": "sandbox"])
        let sandbox = try Sandbox(configuration: config, log: log)
        // One service (its listener and control endpoint start and stop together).
        let group = ServiceGroup([ClosureService("sandbox", start: sandbox.start, stop: sandbox.stop)], log: log)
        try group.run(shutdownMessage: "sandbox stopping") {
            print("liverelay sandbox")
            print("  APNs + FCM + OAuth (h2, TLS): \(sandbox.baseURL)   token_uri \(sandbox.tokenURI)")
            print("  control (HTTP/1.1, JSON):     \(sandbox.controlURL)/sandbox/deliveries")
            print("  APNs demo key: team_id \(sandbox.teamId), key_id \(sandbox.keyId)")
            print("  FCM demo service account: \(sandbox.clientEmail) (project \(sandbox.projectId))")
            print("files:")
            for (name, path) in sandbox.files.sorted(by: { $0.key < $1.key }) { print("  \(name): \(path)") }
            print("environment for LiveRelay:")
            for line in sandbox.environmentLines(caFile: sandbox.files["ca.pem"]) { print("  export \(line)") }
            fflush(nil)
        }
    }
}
