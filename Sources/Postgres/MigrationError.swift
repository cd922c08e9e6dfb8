/// Why `Migrator` refused to run.
public enum MigrationError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The named migration is recorded as applied but its file's SHA-256 differs: applied
    /// migrations must never be edited; add a new one instead.
    case modified(String)
    /// The named migration is recorded as applied but no longer exists in the directory.
    case missing(String)
    /// A `.sql` file whose name is not `NNNN_name.sql` (digits, underscore, name), or whose
    /// number repeats another file's; or the directory could not be read (the path is given).
    case badFileName(String)

    /// One line for logs and the `migrate` command's output.
    public var description: String {
        switch self {
        case .modified(let name): return "migration \(name) was modified after it was applied"
        case .missing(let name): return "migration \(name) was applied but its file is missing"
        case .badFileName(let name): return "bad migration file name \(name) (expected NNNN_name.sql)"
        }
    }
}
