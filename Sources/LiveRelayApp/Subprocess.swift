import Foundation

/// Runs a program to completion with `posix_spawn` + `waitpid`.
///
/// Foundation's `Process` is avoided on purpose: with `pg_ctl start`, whose postmaster
/// outlives it, `Process.waitUntilExit` was seen never to return (the child stayed a zombie).
/// Output (stdout and stderr together) goes to a temporary file, never a pipe a daemon could
/// keep open.
enum Subprocess {
    /// Runs `argv` (absolute path first) with stdin from /dev/null.
    /// - Returns: the exit status (128 + signal when killed) and the combined output.
    /// - Throws: `EmbeddedPostgresError` when the program cannot be started.
    static func run(_ argv: [String]) throws -> (Int32, String) {
        let outPath = NSTemporaryDirectory() + "liverelay-sub-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
        defer { unlink(outPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for a in cargs { free(a) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, &cargs, environ)
        guard rc == 0 else { throw EmbeddedPostgresError("cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        let exited = status & 0x7F == 0
        return (exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), text)
    }
}
