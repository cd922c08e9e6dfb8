import Foundation
import XCTest
import LiveRelayTestSupport
import Crypto
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// `deploy/bench/fanout` (docs/channels.md "Fan-out"): the API, dispatcher, channel worker and
/// sandbox of `EndToEndHarness`, with members seeded straight in the database. Prints `key=value`
/// lines; asserts no speed. Runs only with `LIVERELAY_BENCH_FANOUT=1`.
///
/// 1. `BENCH_WRITES` channel updates each to a channel with 10 fan-out members and to one with
///    `BENCH_FANOUT_MEMBERS` fan-out + `BENCH_BROADCAST_MEMBERS` broadcast members, interleaved:
///    the `202` latency p50/p99 of each and their ratio;
/// 2. after the queue drained, one write to the large channel: seconds from its commit to the
///    last fan-out request (`max(sent_at)` of its per-target operations), fan-out pushes/s over
///    the walk, seconds from the commit to the first fan-out request and to the end of the walk
///    (`fanout_done_at`: the expander's share), and the broadcast requests the sandbox received;
/// 3. h2load into the same sink (the sandbox's APNs port): as many requests as fan-out members,
///    with the headers and body of the last fan-out push and a provider token minted with the
///    sandbox's own key, one connection, `BENCH_H2LOAD_STREAMS` (128) streams in flight:
///    h2load's `finished in … req/s` line, `h2load_requests_per_second=` and
///    `ratio_fanout_to_h2load=` (fan-out pushes/s over h2load's req/s, same run).
final class FanoutBenchTests: XCTestCase {
    func env(_ k: String, _ d: Int) -> Int { ProcessInfo.processInfo.environment[k].flatMap(Int.init) ?? d }

    func pct(_ a: [Double], _ p: Double) -> Double { a.isEmpty ? 0 : a.sorted()[min(a.count - 1, Int(Double(a.count) * p))] }

    func testFanoutBench() throws {
        guard ProcessInfo.processInfo.environment["LIVERELAY_BENCH_FANOUT"] == "1" else { return }
        let h = try EndToEndHarness.make()
        defer { h.tearDown() }
        let fanout = env("BENCH_FANOUT_MEMBERS", 100_000), broadcast = env("BENCH_BROADCAST_MEMBERS", 1_000), writes = env("BENCH_WRITES", 500)
        let appId = "com.example.delivery"
        let t = try h.tenantWithSandboxCredentials(appId: appId)
        let tenant = t.id
        _ = try h.db.system { c in try c.execute("UPDATE tenants SET daily_push_quota = 100000000 WHERE tenant_id = $1", [tenant]) }
        func channel(_ label: String) throws -> (id: String, apns: String) {
            let r = h.call(
                "POST", "/v1/remote-updates/channels",
                [
                    "app_id": .string(appId), "environment": "sandbox", "activity_type": "delivery",
                    "attributes_type": "DeliveryAttributes", "label": .string(label),
                    "idempotency_key": .string(label)
                ], as: t.master)
            guard r.status == 201, let id = r["id"]?.stringValue, let apns = r["apns_channel_id"]?.stringValue else {
                throw FixtureFailure("channel creation failed: \(r)")
            }
            return (id, apns)
        }
        let small = try channel("small"), large = try channel("large")
        // One iOS 17 installation holding every fan-out member and one iOS 18 installation for the broadcast members.
        let seedStart = Date()
        try h.db.tenant(tenant) { c in
            let pk = try c.query("SELECT id FROM publishable_keys WHERE tenant_id = $1 LIMIT 1", [tenant])[0].string("id")
            try c.execute(
                """
                INSERT INTO installations (tenant_id, id, publishable_key_id, app_id, platform, environment, install_id)
                VALUES ($1, 'ins_bench17', $2, $3, 'ios', 'sandbox', 'bench17'), ($1, 'ins_bench18', $2, $3, 'ios', 'sandbox', 'bench18')
                """, [tenant, pk, appId])
            for (ch, prefix, n, inst, delivery) in [
                (small.id, "s", 10, "ins_bench17", "fanout"), (large.id, "f", fanout, "ins_bench17", "fanout"),
                (large.id, "b", broadcast, "ins_bench18", "broadcast")
            ] {
                try c.execute(
                    """
                    INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, status, revision, state, push_token, token_status,
                                         channel_id, delivery)
                    SELECT $1, 'tgt_' || $2 || lpad(g::text, 9, '0'), $3, 'remote', 'delivery', 'ready', 1, '{"message": "seed"}',
                           CASE WHEN $6 = 'fanout' THEN lpad(to_hex(g), 63, '0') || $2 END,
                           CASE WHEN $6 = 'fanout' THEN 'registered' ELSE 'pending' END, $4, $6
                      FROM generate_series(1, $5) g
                    """, [tenant, prefix == "f" ? "a" : prefix == "s" ? "c" : "b", inst, ch, n, delivery])
            }
        }
        print("bench: seeded \(fanout) fan-out + \(broadcast) broadcast members in \(String(format: "%.1f", Date().timeIntervalSince(seedStart))) s")
        let key = h.call(
            "POST", "/v1/remote-updates/sender-keys",
            [
                "targets": [.string(small.id), .string(large.id)], "created_from": [],
                "permissions": ["activities:update", "activities:end", "activities:read-state"],
                "idempotency_key": "bench-key"
            ], as: t.master)
        let sender = try XCTUnwrap(key["credential"]?.stringValue)
        let got = h.call("GET", "/v1/remote-updates/channels/\(large.id)", as: sender)
        XCTAssertEqual(got["members"]?["fanout"]?.intValue, Int64(fanout))

        // 1. 202 latency, interleaved.
        var lat: [String: [Double]] = ["small": [], "large": []]
        var rev: [String: Int64] = ["small": 0, "large": 0]
        for i in 0..<writes {
            for (name, ch) in [("small", small.id), ("large", large.id)] {
                let began = Date()
                let r = h.call(
                    "POST", "/v1/remote-updates/channels/\(ch)/update",
                    [
                        "state": ["message": .string("w\(i)")],
                        "expected_revision": .int(rev[name]!),
                        "idempotency_key": .string("\(name)-\(i)")
                    ], as: sender)
                lat[name]!.append(Date().timeIntervalSince(began))
                XCTAssertEqual(r.status, 202, "\(r)")
                rev[name]! += 1
            }
        }
        let s50 = pct(lat["small"]!, 0.5), s99 = pct(lat["small"]!, 0.99), l50 = pct(lat["large"]!, 0.5), l99 = pct(lat["large"]!, 0.99)
        var out = [
            String(format: "write_202_ms_p50_members_10=%.2f", s50 * 1000), String(format: "write_202_ms_p99_members_10=%.2f", s99 * 1000),
            String(format: "write_202_ms_p50_members_%d=%.2f", fanout, l50 * 1000),
            String(format: "write_202_ms_p99_members_%d=%.2f", fanout, l99 * 1000),
            String(format: "write_202_ratio_p50=%.2f", s50 > 0 ? l50 / s50 : 0), String(format: "write_202_ratio_p99=%.2f", s99 > 0 ? l99 / s99 : 0)
        ]
        for line in out { print(line) }
        var lines = out

        // 2. Let everything drain, then one measured write.
        // The poll must not load the cores it measures: `EXISTS` stops at the first live row,
        // where the former `count(*)` of every queued operation took ~144 ms per call beside a
        // 100,000-member fan-out (pg_stat_statements: 32 s of the 105 s run, every 0.2 s).
        func idle() throws -> Bool {
            try h.db.system { c in
                try c.query(
                    """
                    SELECT NOT EXISTS (SELECT 1 FROM operations WHERE status IN ('queued', 'sending'))
                           AND NOT EXISTS (SELECT 1 FROM channel_operations
                                            WHERE fanout_state = 'pending' OR broadcast_status IN ('queued', 'sending')) AS idle
                    """)[0].bool("idle")
            }
        }
        func pushesReceived() -> Int { let s = h.sandbox.stats; return s.apnsRequests + s.fcmRequests }
        let drainStart = Date()
        while try !idle() && Date().timeIntervalSince(drainStart) < 600 { Thread.sleep(forTimeInterval: 0.5) }
        // The sandbox's monotonic counter: its delivery log keeps only the newest 100,000 entries,
        // which one 100,000-member fan-out alone fills (a count taken from the log read 0 here).
        let broadcastsBefore = h.sandbox.stats.broadcastRequests, pushesBefore = pushesReceived()
        let walBefore = try Self.writeVolume(h)
        let r = h.call(
            "POST", "/v1/remote-updates/channels/\(large.id)/update",
            [
                "state": ["message": "measured"], "expected_revision": .int(rev["large"]!),
                "idempotency_key": "measured"
            ], as: sender)
        XCTAssertEqual(r.status, 202, "\(r)")
        let cop = try XCTUnwrap(r["channel_operation"]?["id"]?.stringValue)
        let started = Date(), waveBegan = Self.monotonicSeconds()
        let cpuBefore = Self.cpuTicks()
        let claimedAtFanout = h.metrics.counter("liverelay_dispatch_claimed_at_fanout_total", help: "", labels: [])
        let claimedBefore = claimedAtFanout.value([])
        // Wait in process until the sandbox got a request per member (no database reads while
        // the fan-out runs), then until the queue is idle (every result committed).
        while pushesReceived() - pushesBefore < fanout && Date().timeIntervalSince(started) < 600 { Thread.sleep(forTimeInterval: 0.05) }
        let cpuAfter = Self.cpuTicks(), claimedDuring = claimedAtFanout.value([]) - claimedBefore
        let walAfter = try Self.writeVolume(h)
        // For profiles of the wave alone (`perf record -k CLOCK_MONOTONIC`, docs/delivery.md "Measuring").
        print(
            String(format: "bench: wave CLOCK_MONOTONIC %.3f..%.3f s, ", waveBegan, Self.monotonicSeconds())
                + "UTC \(Timestamp.format(started))..\(Timestamp.format(Date()))")
        while try !idle() && Date().timeIntervalSince(started) < 600 { Thread.sleep(forTimeInterval: 0.2) }
        let row = try h.db.system { c in
            try c.query(
                """
                SELECT count(*) AS n, EXTRACT(EPOCH FROM max(o.sent_at) - min(k.created_at))::float8 AS to_last,
                       EXTRACT(EPOCH FROM max(o.sent_at) - min(o.sent_at))::float8 AS spread,
                       count(*) FILTER (WHERE o.status = 'accepted') AS accepted,
                       count(*) FILTER (WHERE o.attempts > 1) AS retried, COALESCE(max(o.attempts), 0) AS max_attempts,
                       EXTRACT(EPOCH FROM max(k.fanout_done_at) - min(k.created_at))::float8 AS expanded,
                       EXTRACT(EPOCH FROM min(o.sent_at) - min(k.created_at))::float8 AS to_first
                  FROM operations o JOIN channel_operations k ON k.tenant_id = o.tenant_id AND k.id = o.channel_operation_id
                 WHERE o.channel_operation_id = $1
                """, [cop])[0]
        }
        let n = try row.int("n"), toLast = try row.optionalDouble("to_last") ?? 0, spread = try row.optionalDouble("spread") ?? 0
        let fanoutRate = spread > 0 ? Double(n) / spread : 0
        out = [
            "fanout_members=\(fanout)", "fanout_operations=\(n)", "fanout_accepted=\(try row.int("accepted"))",
            "fanout_retried_operations=\(try row.int("retried"))", "fanout_max_attempts=\(try row.int("max_attempts"))",
            String(format: "fanout_commit_to_last_request_seconds=%.2f", toLast),
            String(format: "fanout_pushes_per_second=%.0f", fanoutRate),
            String(format: "fanout_commit_to_first_request_seconds=%.2f", try row.optionalDouble("to_first") ?? 0),
            String(format: "fanout_commit_to_expanded_seconds=%.2f", try row.optionalDouble("expanded") ?? 0),
            "broadcast_requests_per_write=\(h.sandbox.stats.broadcastRequests - broadcastsBefore)",
            // Diagnostics of the wave (write to the last push received): the share of both
            // cores busy (/proc/stat), and the members whose push was claimed at fan-out
            // (docs/delivery.md "Claims at fan-out") rather than by the fair claim.
            String(format: "fanout_cpu_busy_percent=%.0f", Self.busyPercent(cpuBefore, cpuAfter)),
            String(format: "fanout_claimed_at_fanout=%.0f", claimedDuring),
            // PostgreSQL's writes during the wave (from the write to the last request, whole
            // cluster), per member: WAL bytes and full-page images (pg_stat_wal),
            // temporary-file bytes (pg_stat_database). PostgreSQL 15 flushes both kinds of
            // counters from each backend up to a second late, so both may undercount a little.
            String(format: "fanout_wal_bytes_per_push=%.0f", Double(walAfter.wal - walBefore.wal) / Double(max(1, fanout))),
            String(format: "fanout_wal_fpi_per_push=%.3f", Double(walAfter.fpi - walBefore.fpi) / Double(max(1, fanout))),
            String(format: "fanout_temp_bytes_per_push=%.0f", Double(walAfter.temp - walBefore.temp) / Double(max(1, fanout))),
            String(format: "drain_seconds=%.1f", Date().timeIntervalSince(drainStart))
        ]
        for line in out { print(line) }
        lines += out
        lines += try h2loadIntoTheSandbox(h, requests: fanout, fanoutRate: fanoutRate)
        let report = ([String](lat.keys.sorted().map { "bench: \($0) writes=\(lat[$0]!.count)" }) + lines).joined(separator: "\n") + "\n"
        try? report.write(
            toFile: ProcessInfo.processInfo.environment["BENCH_REPORT"] ?? (NSTemporaryDirectory() + "fanout-bench.txt"),
            atomically: true, encoding: .utf8)
    }

    /// PostgreSQL's cumulative write volume: WAL bytes and full-page images (`pg_stat_wal`) and
    /// this database's temporary-file bytes (`pg_stat_database.temp_bytes`).
    static func writeVolume(_ h: EndToEndHarness) throws -> (wal: Int64, fpi: Int64, temp: Int64) {
        try h.db.system { c in
            let r = try c.query(
                """
                SELECT w.wal_bytes::int8 AS wal, w.wal_fpi AS fpi, d.temp_bytes AS temp
                  FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()
                """)[0]
            return (try r.int64("wal"), try r.int64("fpi"), try r.int64("temp"))
        }
    }

    /// CLOCK_MONOTONIC, seconds (the clock `perf record -k CLOCK_MONOTONIC` stamps samples with).
    static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// The machine's CPU ticks from `/proc/stat`'s first line: (busy, total); (0, 0) when
    /// unreadable.
    static func cpuTicks() -> (busy: Double, total: Double) {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let first = text.split(separator: "\n").first
        else { return (0, 0) }
        let v = first.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard v.count >= 5 else { return (0, 0) }
        let total = v.prefix(8).reduce(0, +), idle = v[3] + v[4]  // idle + iowait
        return (total - idle, total)
    }

    /// Busy share of all cores between two `cpuTicks` readings, percent.
    static func busyPercent(_ a: (busy: Double, total: Double), _ b: (busy: Double, total: Double)) -> Double {
        b.total > a.total ? 100 * (b.busy - a.busy) / (b.total - a.total) : 0
    }

    /// Step 3: h2load posts `requests` copies of the last fan-out push (its path, headers and
    /// body, as the sandbox recorded them; no `apns-id`, which h2load would repeat) to the
    /// sandbox's APNs port with a provider token minted from the sandbox's key. Returns the
    /// report lines; a missing or failing h2load is reported, not hidden (`h2load: …`).
    func h2loadIntoTheSandbox(_ h: EndToEndHarness, requests: Int, fanoutRate: Double) throws -> [String] {
        let streams = env("BENCH_H2LOAD_STREAMS", 128)
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/h2load") else { return ["h2load: not installed"] }
        guard let last = h.sandbox.deliveries(provider: "apns").last(where: { $0.accepted }) else { return ["h2load: no fan-out push to copy"] }
        let body = NSTemporaryDirectory() + "fanout-bench-body-\(getpid()).json"
        try Data(last.payload.serialized()).write(to: URL(fileURLWithPath: body))
        defer { try? FileManager.default.removeItem(atPath: body) }
        let jwt = try JWT.sign(
            header: ["kid": .string(h.sandbox.keyId)],
            claims: ["iss": .string(h.sandbox.teamId), "iat": .int(Int64(Date().timeIntervalSince1970))], algorithm: .es256(h.sandbox.apnsKey))
        var args = ["-n", String(requests), "-c", "1", "-m", String(streams), "-t", "1", "-d", body, "-H", "authorization: bearer \(jwt)"]
        for k in ["apns-topic", "apns-push-type", "apns-priority", "apns-expiration"] {
            if let v = last.headers[k] { args += ["-H", "\(k): \(v)"] }
        }
        args.append("https://127.0.0.1:\(h.sandbox.port)/3/device/\(last.token)")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/h2load")
        p.arguments = args
        let pipe = Pipe()
        p.standardOutput = pipe; p.standardError = pipe
        try p.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard let finished = text.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }).map(String.init),
            let r = finished.range(of: #"[0-9.]+ req/s"#, options: .regularExpression), let rate = Double(finished[r].dropLast(6))
        else { return ["h2load: failed: \(text.suffix(400))"] }
        let statusLine = text.split(separator: "\n").first { $0.hasPrefix("status codes:") }.map(String.init) ?? "status codes: ?"
        return [
            "h2load (1 connection, \(streams) streams in flight, \(requests) requests into the sandbox): \(finished); \(statusLine)",
            String(format: "h2load_requests_per_second=%.0f", rate),
            String(format: "ratio_fanout_to_h2load=%.3f", rate > 0 ? fanoutRate / rate : 0)
        ]
    }
}
