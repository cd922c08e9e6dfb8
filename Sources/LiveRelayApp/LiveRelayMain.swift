import Foundation
import JSON
import LiveRelayCore
import LiveRelayAPI
import LiveRelayStore
import Logging

/// Entry point of the `liverelay` executable (docs/configuration.md): one binary, subcommands.
public enum LiveRelayMain {
    /// The product version printed by `liverelay version` (`LiveRelayVersion.current`, the one place).
    public static let version = LiveRelayVersion.current

    static let usage = """
        usage: liverelay <command> [options]

        commands:
          serve      API + dispatcher + maintenance in one process (the default)
          api        the HTTP API only
          worker     the dispatcher only (any number may share one database)
          migrate    apply pending database migrations and exit
          admin      operator tasks straight on the database (see `liverelay admin --help`)
          remote     a client of the sender API for scripts (see `liverelay remote --help`)
          gc         delete collectable template versions now (`--dry-run` lists them)
          doctor     check configuration, database role, migrations, KEK, clock and provider credentials
          sandbox    a local APNs/FCM-compatible server for development and tests (see `liverelay sandbox --help`)
          simulate-device  one app installation receiving pushes from the sandbox (see `liverelay simulate-device --help`)
          version    print the version
          help       this text

        configuration is read from the environment (DATABASE_URL, LIVERELAY_LISTEN, LIVERELAY_KEK, …);
        without DATABASE_URL an embedded PostgreSQL cluster runs under ./.liverelay/.
        """

    /// Runs subcommand `name` and exits: 0 when `body` returns, 2 after a `UsageError` (its
    /// message and a pointer to `--help` on stderr), 1 after any other error (on stderr).
    static func exitAfter(_ name: String, _ body: () throws -> Void) -> Never {
        do { try body() } catch let e as UsageError {
            FileHandle.standardError.write(Data("liverelay \(name): \(e.message)\nsee `liverelay \(name) --help`\n".utf8))
            exit(2)
        } catch {
            FileHandle.standardError.write(Data("liverelay \(name): \(error)\n".utf8))
            exit(1)
        }
        exit(0)
    }

    /// Runs the command line `args` (program name first) and exits the process with
    /// 0 (success), 1 (failure) or 2 (usage error).
    public static func run(_ args: [String]) -> Never {
        var rest = Array(args.dropFirst())
        let command = rest.isEmpty ? "serve" : rest.removeFirst()
        if rest.contains("--help") || rest.contains("-h") { exit(help(command)) }
        switch command {
        case "version", "--version":
            print("liverelay \(version)")
            exit(0)
        case "help", "--help", "-h":
            print(usage)
            exit(0)
        case "remote":
            exit(RemoteCommand.main(rest))
        case "doctor":
            exit(DoctorCommand.main(rest))
        case "serve", "api", "worker", "migrate", "admin", "gc":
            break
        case "sandbox":
            exitAfter(command) { try SandboxCommand.run(rest) }
        case "simulate-device":
            exitAfter(command) { try SimulateDeviceCommand.run(rest) }
        default:
            FileHandle.standardError.write(Data("liverelay: unknown command \(command.debugDescription)\n\n\(usage)\n".utf8))
            exit(2)
        }
        let config: Configuration
        do { config = try Configuration.load() } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            exit(2)
        }
        let log = Logger(minimum: config.logLevel, context: ["component": .string(command)])
        do {
            switch command {
            case "serve", "api":
                if !rest.isEmpty { throw UsageError("\(command) takes no arguments") }
                try ServeCommand.run(config: config, log: log, role: command == "serve" ? .serve : .api)
            case "worker":
                if !rest.isEmpty { throw UsageError("worker takes no arguments") }
                try WorkerCommand.run(config: config, log: log)
            case "migrate":
                if !rest.isEmpty { throw UsageError("migrate takes no arguments") }
                let rt = try Runtime(config: config, log: log)
                defer { rt.shutdown() }
                let pool = try rt.openDatabase(poolSize: 2)
                pool.close()
                print("migrations current")
            case "gc":
                try GCCommand.run(rest, config: config, log: Logger(minimum: max(config.logLevel, .warning)))
            case "admin":
                try AdminCommand.run(rest, config: config, log: Logger(minimum: max(config.logLevel, .warning)))
            default:
                break
            }
        } catch let e as UsageError {
            FileHandle.standardError.write(Data("liverelay \(command): \(e.message)\nsee `liverelay \(command) --help`\n".utf8))
            exit(2)
        } catch let e as ConfigurationError {
            FileHandle.standardError.write(Data("\(e)\n".utf8))  // one line per problem, like Configuration.load's
            exit(2)
        } catch {
            log.error("\(command) failed", ["error": .string("\(error)")])
            FileHandle.standardError.write(Data("liverelay \(command): \(error)\n".utf8))
            exit(1)
        }
        exit(0)
    }

    static func help(_ command: String) -> Int32 {
        switch command {
        case "serve", "api":
            print(
                """
                usage: liverelay \(command)

                Runs \(command == "serve" ? "the API, dispatcher and maintenance" : "the HTTP API") until SIGTERM/SIGINT, then drains
                in-flight requests. Listens on LIVERELAY_LISTEN (default 127.0.0.1:8080), which also answers /healthz,
                /readyz and /metrics (LIVERELAY_METRICS_LISTEN=host:port adds a listener for those alone). Without
                DATABASE_URL it starts (and on exit stops) an embedded PostgreSQL cluster under ./.liverelay/postgres.
                """)
        case "worker":
            print(
                """
                usage: liverelay worker

                Runs the dispatcher (claims queued operations, sends them to APNs/FCM, rescues expired leases,
                expires operations, ends activities after 8 h) until SIGTERM/SIGINT. Any number of workers may
                share one DATABASE_URL. It also runs the maintenance service (template-version GC, idempotency
                purge). LIVERELAY_DISPATCH_THREADS (16), LIVERELAY_DISPATCH_BATCH (512),
                LIVERELAY_DISPATCH_LEASE_SECONDS (30), LIVERELAY_WORKER_ID tune it. LIVERELAY_METRICS_LISTEN=host:port
                serves /metrics, /healthz and /readyz (default: none).
                """)
        case "migrate":
            print("usage: liverelay migrate\n\nApplies pending Migrations/NNNN_*.sql in order (each in one transaction, under an advisory lock).")
        case "admin":
            print(AdminCommand.usage)
        case "remote":
            print(RemoteCommand.usage)
        case "doctor":
            print(DoctorCommand.usage)
        case "gc":
            print(GCCommand.usage)
        case "sandbox":
            print(SandboxCommand.usage)
        case "simulate-device":
            print(SimulateDeviceCommand.usage)
        default:
            print(usage)
        }
        return 0
    }
}

/// A command-line mistake: printed with a pointer to `--help`, exit status 2.
struct UsageError: Error {
    let message: String
    init(_ m: String) { message = m }

    /// Parses a subcommand's options: `--key value`, `--key=value`, and bare `--flag` for the
    /// names in `flags` (value `"true"`); keyed by the name without `--`, a repeated key keeps
    /// the last value.
    /// - Throws: `UsageError` for an argument not starting with `--` or a last `--key` without a value.
    static func options(_ args: [String], flags: Set<String>) throws -> [String: String] {
        var out: [String: String] = [:]
        var i = 0
        while i < args.count {
            let a = args[i]
            guard a.hasPrefix("--") else { throw UsageError("unexpected argument \(a.debugDescription)") }
            if let eq = a.firstIndex(of: "=") {
                out[String(a[a.index(a.startIndex, offsetBy: 2)..<eq])] = String(a[a.index(after: eq)...])
            } else if flags.contains(String(a.dropFirst(2))) {
                out[String(a.dropFirst(2))] = "true"
            } else {
                guard i + 1 < args.count else { throw UsageError("\(a) needs a value") }
                out[String(a.dropFirst(2))] = args[i + 1]
                i += 1
            }
            i += 1
        }
        return out
    }
}
