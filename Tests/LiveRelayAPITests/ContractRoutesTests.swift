import Foundation
import XCTest
import LiveRelayTestSupport
import Crypto
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// `openapi.yaml` ↔ router parity: every route the server registers is documented, and every
/// documented path + method is served (except operations marked `x-liverelay-planned: true`,
/// which docs/endpoints.md specifies and another change will add; once served they must lose the mark).
/// The document is read line by line (no YAML library here): paths are keys indented by two
/// spaces under `paths:`, operations method keys indented by four.
final class ContractRoutesTests: XCTestCase {
    struct Operation: Hashable, CustomStringConvertible {
        let method: String
        let path: String
        var description: String { "\(method) \(path)" }
        /// `{name}` segments compared by position only.
        var normalized: String {
            method + " "
                + path.split(separator: "/", omittingEmptySubsequences: false)
                .map { $0.hasPrefix("{") && $0.hasSuffix("}") ? "{}" : String($0) }.joined(separator: "/")
        }
    }

    static var repoRoot: String {
        ProcessInfo.processInfo.environment["LIVERELAY_TEST_REPO_ROOT"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// (documented operations, operations marked planned) from the `paths:` section.
    static func documented() throws -> (all: [Operation], planned: Set<Operation>) {
        let text = try String(contentsOfFile: repoRoot + "/openapi.yaml", encoding: .utf8)
        var inPaths = false
        var path: String?
        var current: Operation?
        var all: [Operation] = []
        var planned: Set<Operation> = []
        let methods: Set<String> = ["get", "put", "post", "patch", "delete", "head", "options", "trace"]
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            if line.hasPrefix("#") || line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
            if !line.hasPrefix(" ") {  // a top-level key
                inPaths = line.hasPrefix("paths:")
                path = nil
                current = nil
                continue
            }
            guard inPaths else { continue }
            if line.hasPrefix("  ") && !line.hasPrefix("   ") {
                var key = line.trimmingCharacters(in: .whitespaces)
                guard key.hasSuffix(":") else { continue }
                key.removeLast()
                if key.count >= 2, let q = key.first, q == "'" || q == "\"", key.last == q { key = String(key.dropFirst().dropLast()) }
                path = key.hasPrefix("/") ? key : nil
                current = nil
            } else if line.hasPrefix("    ") && !line.hasPrefix("     "), let path {
                let key = line.trimmingCharacters(in: .whitespaces)
                if key.hasSuffix(":"), methods.contains(String(key.dropLast())) {
                    let op = Operation(method: String(key.dropLast()).uppercased(), path: path)
                    all.append(op)
                    current = op
                } else {
                    current = nil
                }
            } else if let c = current, line.trimmingCharacters(in: .whitespaces) == "x-liverelay-planned: true" {
                planned.insert(c)
            }
        }
        return (all, planned)
    }

    /// The routes of the real router (no request is served; the context is never used).
    static func served() throws -> [Operation] {
        let pool = PostgresPool(conninfo: "postgresql:///unused?host=/nonexistent", maxConnections: 1)
        let db = Database(pool: pool)
        let log = Logger(minimum: .error, sink: { _ in })
        let ctx = APIContext(
            db: db, auth: Authenticator(db: db, log: log), kek: try AESGCM(key: SecureRandom.bytes(32)), log: log,
            metrics: MetricsRegistry(), migrator: nil)
        return APIRoutes.router(ctx, defaultExpirationSeconds: 3600).routes.map { Operation(method: $0.method, path: $0.pattern) }
    }

    func testDocumentParses() throws {
        let (all, planned) = try Self.documented()
        XCTAssertGreaterThanOrEqual(all.count, 40, "the line reader found too few operations: \(all)")
        XCTAssertEqual(Set(all.map(\.normalized)).count, all.count, "an operation is documented twice")
        XCTAssertTrue(planned.isSubset(of: Set(all)))
        print("contract: \(all.count) documented operations (\(planned.count) planned: \(planned.map(\.description).sorted()))")
    }

    func testEveryServedRouteIsDocumented() throws {
        let documented = Set(try Self.documented().all.map(\.normalized))
        let served = try Self.served()
        XCTAssertGreaterThanOrEqual(served.count, 40)
        let missing = served.filter { !documented.contains($0.normalized) }
        XCTAssertEqual(missing, [], "served but not in openapi.yaml: \(missing)")
        print("contract: \(served.count) served routes, \(served.count - missing.count) documented")
    }

    func testEveryDocumentedOperationIsServed() throws {
        let (all, planned) = try Self.documented()
        let served = Set(try Self.served().map(\.normalized))
        let unserved = all.filter { !served.contains($0.normalized) && !planned.contains($0) }
        XCTAssertEqual(unserved, [], "documented in openapi.yaml but not served: \(unserved)")
        let stale = planned.filter { served.contains($0.normalized) }
        XCTAssertEqual(stale.map(\.description).sorted(), [], "served now: drop `x-liverelay-planned` from these operations")
    }

    /// Every error `code` the handlers can throw appears in the envelope's enum.
    func testEveryErrorCodeIsDocumented() throws {
        let text = try String(contentsOfFile: Self.repoRoot + "/openapi.yaml", encoding: .utf8)
        let sources = Self.repoRoot + "/Sources"
        var codes: Set<String> = []
        let files = FileManager.default.enumerator(atPath: sources)?.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") } ?? []
        let regex = try NSRegularExpression(pattern: #"code: "([A-Z_]+)""#)
        for f in files
        where f.hasPrefix("LiveRelayAPI/") || f.hasPrefix("LiveRelayCore/") || f.hasPrefix("LiveRelayStore/") || f.hasPrefix("HTTPServer/") {
            let s = try String(contentsOfFile: sources + "/" + f, encoding: .utf8)
            for m in regex.matches(in: s, range: NSRange(s.startIndex..., in: s)) {
                codes.insert(String(s[Range(m.range(at: 1), in: s)!]))
            }
        }
        XCTAssertGreaterThan(codes.count, 15)
        // The `ErrorEnvelope` schema's `code` enum: a response whose code is not listed fails
        // schema conformance in the contract run (deploy/contract/run), so a mention elsewhere
        // in the file is not enough.
        guard let start = text.range(of: "    ErrorEnvelope:"),
            let open = text.range(of: "enum: [", range: start.upperBound..<text.endIndex),
            let close = text.range(of: "]", range: open.upperBound..<text.endIndex)
        else {
            throw FixtureFailure("openapi.yaml has no ErrorEnvelope code enum")
        }
        let listed = Set(text[open.upperBound..<close.lowerBound].split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        XCTAssertTrue(listed.contains("INVALID_REQUEST"), "\(listed)")
        let undocumented = codes.filter { !listed.contains($0) }.sorted()
        XCTAssertEqual(undocumented, [], "error codes thrown by the server but absent from openapi.yaml's ErrorEnvelope code enum")
    }
}
