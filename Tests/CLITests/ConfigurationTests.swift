import Foundation
import XCTest
import LiveRelayApp
import LiveRelayCore

/// `Configuration.load` at the exact boundaries of the variables it parses
/// (docs/configuration.md): the last accepted value, the first refused one, and bad input
/// reported as one problem line naming the variable — never silently ignored. Pure: no I/O.
final class ConfigurationTests: XCTestCase {
    private func problems(_ env: [String: String]) -> [String] {
        do {
            _ = try Configuration.load(env)
            return []
        } catch let e as ConfigurationError {
            return e.problems
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    private func load(_ env: [String: String], file: StaticString = #filePath, line: UInt = #line) throws -> Configuration {
        do { return try Configuration.load(env) } catch {
            XCTFail("\(env) refused: \(error)", file: file, line: line)
            throw error
        }
    }

    private func assertRefused(_ k: String, _ v: String, file: StaticString = #filePath, line: UInt = #line) {
        let p = problems([k: v])
        XCTAssertEqual(p.count, 1, "\(k)=\(v): \(p)", file: file, line: line)
        XCTAssertTrue(p.first?.hasPrefix(k + " ") ?? false, "names the variable: \(p)", file: file, line: line)
    }

    func testRetentionDaysBoundaries() throws {
        XCTAssertEqual(try load([:]).retentionDays, TenantLimits.defaultRetentionDays)
        XCTAssertEqual(try load(["LIVERELAY_RETENTION_DAYS": ""]).retentionDays, TenantLimits.defaultRetentionDays, "empty = unset")
        XCTAssertEqual(try load(["LIVERELAY_RETENTION_DAYS": "1"]).retentionDays, 1)
        XCTAssertEqual(try load(["LIVERELAY_RETENTION_DAYS": "3650"]).retentionDays, 3650)
        for bad in ["0", "3651", "-1", "30d", "1.5", " 30"] { assertRefused("LIVERELAY_RETENTION_DAYS", bad) }
    }

    func testPerTenantCapBoundaries() throws {
        for k in ["LIVERELAY_MAX_INSTALLATIONS_PER_TENANT", "LIVERELAY_MAX_LIVE_TARGETS_PER_TENANT"] {
            let low = try load([k: "1"]).limits, high = try load([k: "1000000000"]).limits
            if k.contains("INSTALLATIONS") {
                XCTAssertEqual(low.maxInstallationsPerTenant, 1)
                XCTAssertEqual(high.maxInstallationsPerTenant, 1_000_000_000)
            } else {
                XCTAssertEqual(low.maxLiveTargetsPerTenant, 1)
                XCTAssertEqual(high.maxLiveTargetsPerTenant, 1_000_000_000)
            }
            for bad in ["0", "1000000001", "-5", "many", "1e6"] { assertRefused(k, bad) }
        }
        let d = try load([:]).limits
        XCTAssertEqual(d.maxInstallationsPerTenant, TenantLimits.defaultMaxInstallations)
        XCTAssertEqual(d.maxLiveTargetsPerTenant, TenantLimits.defaultMaxLiveTargets)
    }

    func testGCIntervalIsValidatedInsteadOfSilentlyIgnored() throws {
        XCTAssertEqual(try load([:]).process.gcIntervalSeconds, 600)
        XCTAssertEqual(try load(["LIVERELAY_GC_INTERVAL_SECONDS": "1"]).process.gcIntervalSeconds, 1)
        XCTAssertEqual(try load(["LIVERELAY_GC_INTERVAL_SECONDS": "2.5"]).process.gcIntervalSeconds, 2.5)
        for bad in ["0.999", "0", "-10", "ten", "nan", "inf"] { assertRefused("LIVERELAY_GC_INTERVAL_SECONDS", bad) }
    }

    func testDispatchSettingsBoundaries() throws {
        let table: [(String, ClosedRange<Int>, KeyPath<ProcessSettings, Int>)] = [
            ("LIVERELAY_DISPATCH_THREADS", 1...512, \.dispatchThreads), ("LIVERELAY_DISPATCH_BATCH", 1...1000, \.dispatchBatch),
            ("LIVERELAY_DISPATCH_LEASE_SECONDS", 3...3600, \.dispatchLeaseSeconds),
            ("LIVERELAY_DISPATCH_MAX_IN_FLIGHT", 1...100_000, \.dispatchMaxInFlight),
            ("LIVERELAY_DISPATCH_CONNECTIONS", 1...64, \.dispatchConnections)
        ]
        for (k, range, field) in table {
            XCTAssertEqual(try load([k: String(range.lowerBound)]).process[keyPath: field], range.lowerBound, k)
            XCTAssertEqual(try load([k: String(range.upperBound)]).process[keyPath: field], range.upperBound, k)
            assertRefused(k, String(range.lowerBound - 1))
            assertRefused(k, String(range.upperBound + 1))
        }
        // Unset: 512 operations per claim and apply (docs/delivery.md "Batch size": a 64-row
        // batch paid the claim's fixed cost eight times as often during a fan-out).
        XCTAssertEqual(try load([:]).process.dispatchBatch, 512)
    }

    func testWorkerIdAndMetricsAddress() throws {
        XCTAssertNil(try load([:]).process.workerId)
        let longest = String(repeating: "w", count: 200)
        XCTAssertEqual(try load(["LIVERELAY_WORKER_ID": longest]).process.workerId, longest)
        assertRefused("LIVERELAY_WORKER_ID", longest + "w")
        assertRefused("LIVERELAY_WORKER_ID", "worker\n1")

        XCTAssertNil(try load([:]).process.metricsListen)
        let any = try XCTUnwrap(try load(["LIVERELAY_METRICS_LISTEN": ":9464"]).process.metricsListen)
        XCTAssertEqual(any.host, "0.0.0.0")
        let v6 = try XCTUnwrap(try load(["LIVERELAY_METRICS_LISTEN": "[::1]:0"]).process.metricsListen)
        XCTAssertEqual(v6.host, "::1")
        XCTAssertEqual(v6.port, 0)
        XCTAssertEqual(try load(["LIVERELAY_METRICS_LISTEN": "127.0.0.1:65535"]).process.metricsListen?.port, 65535)
        for bad in ["localhost", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:http"] { assertRefused("LIVERELAY_METRICS_LISTEN", bad) }
    }

    func testEveryProblemIsReportedAtOnce() {
        let p = problems(["LIVERELAY_RETENTION_DAYS": "0", "LIVERELAY_GC_INTERVAL_SECONDS": "soon", "LIVERELAY_DISPATCH_BATCH": "0"])
        XCTAssertEqual(p.count, 3, "\(p)")
    }
}
