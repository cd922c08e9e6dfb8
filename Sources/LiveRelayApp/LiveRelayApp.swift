/// Entry point of the `liverelay` executable (SPEC §9): dispatches subcommands.
public enum LiveRelayMain {
    /// Runs the command line `args` (argv, program name first) and exits the process.
    public static func run(_ args: [String]) {
        print("liverelay: not built yet")
    }
}
