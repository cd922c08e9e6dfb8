import Postgres

/// The `WHERE` clause of a list query, built from the filters that are present only
/// (docs/http-conventions.md "Pagination").
///
/// A list written with optional filters as `($n::text IS NULL OR column = $n)` reads fine but
/// plans badly: once PostgreSQL switches a prepared statement to its generic plan, such a
/// condition can never bound an index scan, so a keyset page (`id > cursor`) started at the
/// tenant's first row and filtered its way to the cursor (each page cost its offset: reading
/// every page of a million targets was quadratic), and a filter by installation or target read
/// the whole tenant. Here each present filter becomes its own plain condition and its own bound
/// parameter, so every condition can be an index condition; each combination of filters is its
/// own prepared statement (a handful per list).
struct KeysetConditions {
    private(set) var terms: [String] = []
    private(set) var params: [(any PostgresBindable)?] = []

    /// Binds `value` and returns its placeholder (`$1`, `$2`, …).
    mutating func bind(_ value: (any PostgresBindable)?) -> String {
        params.append(value)
        return "$\(params.count)"
    }

    /// Adds `term` with each `?` replaced by the placeholder of the next value of `values`, in order.
    mutating func add(_ term: String, _ values: (any PostgresBindable)?...) {
        var out = "", next = 0
        for ch in term {
            if ch == "?", next < values.count {
                out += bind(values[next]); next += 1
            } else {
                out.append(ch)
            }
        }
        terms.append(out)
    }

    /// Adds `term` (one `?`) only when `value` is present.
    mutating func add(_ term: String, ifPresent value: String?) {
        if let value { add(term, value) }
    }

    /// The conditions joined by `AND` (`TRUE` when there are none).
    var clause: String { terms.isEmpty ? "TRUE" : terms.joined(separator: " AND ") }
}
