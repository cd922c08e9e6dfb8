import Foundation
import XCTest
import Crypto
import Delivery
import HTTP2
import JSON
import LiveRelayCore
@testable import LiveRelayStore
import Postgres
import Synchronization
import LiveRelayTestSupport

/// `deploy/bench/dispatch` (docs/delivery.md "Measuring"): drains queued updates through the
/// dispatcher into a local HTTP/2 sink (TLS, answers 200 at once) via a minimal APNs-shaped
/// event-driven `PushSender`, then runs `h2load` with the same body against the same sink at
/// the same number of streams in flight; measures commit → request lag in a live phase at a
/// steady commit rate; drains again with 200 ms of sink latency per response; and times the
/// claim statement with a small and a large queue. Runs only with `LIVERELAY_BENCH_DISPATCH=1`.
/// Loopback only, bounded.
final class DispatchBenchTests: XCTestCase {
    func env(_ k: String, _ d: Int) -> Int { ProcessInfo.processInfo.environment[k].flatMap(Int.init) ?? d }

    static func loadavg() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "n/a"
    }

    func pct(_ a: [Double], _ p: Double) -> String {
        guard !a.isEmpty else { return "n/a" }
        return String(format: "%.1f ms", a[min(a.count - 1, Int(Double(a.count) * p))] * 1000)
    }

    /// Claim / apply totals of one dispatcher as one report line (load-independent shape: batch
    /// sizes and transactions; durations are wall time under whatever load the machine has).
    func statsLine(_ d: Dispatcher) -> String {
        let s = d.stats
        func avg(_ a: Double, _ n: Int) -> String { n == 0 ? "n/a" : String(format: "%.2f", a / Double(n)) }
        return "claims=\(s.claims) (named \(s.namedClaims)) claim_ms_mean=\(avg(s.claimSeconds * 1000, s.claims)) "
            + "claim_batch_mean=\(avg(Double(s.claimed), s.claims)) applies=\(s.applies) apply_ms_mean=\(avg(s.applySeconds * 1000, s.applies)) "
            + "apply_batch_mean=\(avg(Double(s.applied), s.applies))"
    }

    /// Starts a dispatcher on `sender`, waits until `count` results of tenant `t` are committed.
    /// Returns (seconds until the last result was committed, streams in flight high-water mark).
    func drain(
        _ h: DispatchHarness, sender: SinkSender, tenant t: String, count: Int, batch: Int, threads: Int, worker: String,
        lags: Shared<[Double]>?
    ) throws -> (seconds: Double, streams: Int, dispatcher: Dispatcher) {
        var observer: (@Sendable (Double) -> Void)?
        if let lags { observer = { v in lags.m.withLock { $0.append(v) } } }
        var config = DispatcherConfiguration(
            workerId: worker, senderThreads: threads, claimBatchSize: batch, applyBatchSize: batch,
            leaseSeconds: 60, pollSeconds: 1, lagObserver: observer)
        config.applierThreads = env("BENCH_APPLIERS", config.applierThreads)
        if env("BENCH_CLAIM_SETTINGS", 1) == 0 { config.claimSettings = [] }  // A/B of DispatchStore.claimSettings
        config.claimAtCommit = env("BENCH_CLAIM_AT_COMMIT", 1) == 1  // A/B of claims at commit (docs/delivery.md)
        let d = Dispatcher(db: h.db, conninfo: h.conninfo, sender: sender, configuration: config, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        let started = Date()
        d.start()
        while Date().timeIntervalSince(started) < 300 {
            if sender.answered.load(ordering: .relaxed) >= count && d.outstandingCount == 0 { break }
            Thread.sleep(forTimeInterval: 0.005)
        }
        let seconds = Date().timeIntervalSince(started)
        let accepted = try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status = 'accepted'", [t]).int("n")
        XCTAssertEqual(accepted, count, "every result committed")
        return (seconds, d.streamsInFlight.max, d)
    }

    func testDrainQueuedUpdatesIntoHTTP2Sink() throws {
        let count = env("BENCH_OPERATIONS", 20_000)
        let threads = env("BENCH_SENDER_THREADS", 2)
        let batch = env("BENCH_BATCH", 512)
        let connections = env("BENCH_CONNECTIONS", 2)
        let h = try DispatchHarness.make()
        defer { h.tearDown() }
        let loadStart = Self.loadavg()

        // Sink: HTTP/2 over TLS on loopback, 200 at once (or after the fault delay).
        let ca = try X509.makeCertificateAuthority(commonName: "dispatch bench CA")
        let serverId = try X509.issueServerCertificate(ca: ca, hosts: ["127.0.0.1", "localhost"])
        let caFile = NSTemporaryDirectory() + "dispatch-bench-ca-\(getpid()).pem"
        try ca.certificatePEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        let received = Atomic<Int>(0)
        let sink = HTTP2Server(
            configuration: HTTP2ServerConfiguration(
                certificatePEM: serverId.certificatePEM, privateKeyPEM: serverId.privateKeyPEM,
                maxConcurrentStreams: 1000),
            // The handler never blocks (its delay is the server's own fault, which holds no
            // thread): answered on the connection's thread, as the sandbox answers, so the sink
            // costs the shared cores little. BENCH_SINK_WORKERS=1: on worker threads (before 2026-12-05).
            handlerThreads: ProcessInfo.processInfo.environment["BENCH_SINK_WORKERS"] == "1" ? .workers : .connection
        ) { req in
            received.wrappingAdd(1, ordering: .relaxed)
            return HTTP2Response(status: 200, headers: [("apns-id", req.header("apns-id") ?? "")])
        }
        try sink.start()
        defer { sink.stop() }
        func makeSender() -> SinkSender {
            SinkSender(
                pool: HTTP2ConnectionPool(
                    configuration: HTTP2ClientConfiguration(
                        baseURL: URL(string: "https://127.0.0.1:\(sink.port)")!,
                        extraCAFile: caFile, requestTimeoutSeconds: 60),
                    maxConnections: connections))
        }

        let t = try h.tenant(quota: 100_000_000)
        let inst = try h.installation(t)
        let setup = Date()
        try h.loadQueue(tenant: t, installation: inst, prefix: "bench", count: count)
        print("bench: setup of \(count) targets + queued updates took \(String(format: "%.1f", Date().timeIntervalSince(setup))) s")

        // Phase 1: drain the backlog, counted until the last result is committed.
        let lags = Shared<[Double]>([])
        let sender = makeSender()
        defer { sender.pool.close() }
        let (drainSeconds, streamsMax, d) = try drain(
            h, sender: sender, tenant: t, count: count, batch: batch, threads: threads,
            worker: "bench", lags: lags)
        XCTAssertEqual(received.load(ordering: .relaxed), count, "each update reached the sink exactly once")
        let pushesPerSecond = Double(count) / drainSeconds
        let backlogLags = lags.m.withLock { $0 }.sorted()
        let drainStats = statsLine(d)
        let beforeLive = d.stats
        let poolConnections = max(1, sender.pool.connectionCount)

        // Phase 2: live commits at a steady rate through the write path (several writer threads)
        // → commit-to-request-written lag, from the commit time the in-process hook recorded.
        lags.m.withLock { $0.removeAll() }
        let liveRate = Double(env("BENCH_LIVE_RATE", 1000))
        let liveCount = env("BENCH_LIVE_OPERATIONS", 3000)
        let writers = env("BENCH_LIVE_WRITERS", 8)
        let liveTargets = try (0..<writers * 50).map { i in try h.target(t, installation: inst, token: String(format: "%064x", 900_000 + i)) }
        let liveStart = Date()
        let group = DispatchGroup()
        let errors = Atomic<Int>(0)
        for w in 0..<writers {
            group.enter()
            let th = Thread {
                var i = w
                while i < liveCount {
                    do { try h.update(t, target: liveTargets[(i / writers) % 50 + w * 50], state: ["eta": .int(Int64(i))]) } catch {
                        errors.wrappingAdd(1, ordering: .relaxed)
                    }
                    i += writers
                    let wait = liveStart.addingTimeInterval(Double(i) / liveRate).timeIntervalSinceNow
                    if wait > 0 { Thread.sleep(forTimeInterval: wait) }
                }
                group.leave()
            }
            th.start()
        }
        group.wait()
        let liveSeconds = Date().timeIntervalSince(liveStart)
        try eventually("live phase done", within: 60) {
            try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status IN ('queued', 'sending')", [t]).int("n") == 0
        }
        let liveLags = lags.m.withLock { $0 }.sorted()
        let afterLive = d.stats
        let liveStats =
            "live: claims=\(afterLive.claims - beforeLive.claims) (named \(afterLive.namedClaims - beforeLive.namedClaims), "
            + "\(afterLive.namedClaimed - beforeLive.namedClaimed) ops) claimed=\(afterLive.claimed - beforeLive.claimed) "
            + "claimed_at_commit=\(afterLive.claimedAtCommit - beforeLive.claimedAtCommit) "
            + "applies=\(afterLive.applies - beforeLive.applies)"
        d.stop()

        // Phase 3: h2load, same body and headers, same sink, same streams in flight. At least
        // 200,000 requests: 20,000 took h2load ~0.1 s, so its rate was mostly connection setup
        // and moved 80k–220k req/s between runs.
        let body = sender.sampleBody.m.withLock { $0 }
        let bodyFile = NSTemporaryDirectory() + "dispatch-bench-body-\(getpid()).json"
        try Data(body).write(to: URL(fileURLWithPath: bodyFile))
        let perConnection = max(1, min(1000, (streamsMax + poolConnections - 1) / poolConnections))
        var h2loadLine = "h2load: not installed"
        var h2loadRate: Double?
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/h2load") {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/h2load")
            p.arguments = [
                "-n", String(max(count, 200_000)), "-c", String(poolConnections), "-m", String(perConnection), "-t", "1", "-d", bodyFile,
                "-H", "apns-topic: com.example.app.push-type.liveactivity", "-H", "apns-push-type: liveactivity",
                "-H", "apns-priority: 10", "-H", "content-type: application/json",
                "https://127.0.0.1:\(sink.port)/3/device/\(String(repeating: "ab", count: 32))"
            ]
            let out = Pipe()
            p.standardOutput = out; p.standardError = out
            try p.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            h2loadLine = text.split(separator: "\n").first { $0.hasPrefix("finished in") }.map(String.init) ?? "h2load failed: \(text.suffix(400))"
            if let r = h2loadLine.range(of: #"[0-9.]+ req/s"#, options: .regularExpression) {
                h2loadRate = Double(h2loadLine[r].dropLast(6))
            }
        }

        // Phase 4: 200 ms of sink latency per response (the sandbox's fault delay).
        let delayMs = env("BENCH_SINK_DELAY_MS", 200)
        let delayedCount = env("BENCH_DELAYED_OPERATIONS", 10_000)
        sink.setFaults(HTTP2ServerFaults(responseDelaySeconds: Double(delayMs) / 1000))
        let t2 = try h.tenant(quota: 100_000_000)
        let inst2 = try h.installation(t2)
        try h.loadQueue(tenant: t2, installation: inst2, prefix: "slow", count: delayedCount)
        let slowSender = makeSender()
        defer { slowSender.pool.close() }
        let (slowSeconds, slowStreams, d2) = try drain(
            h, sender: slowSender, tenant: t2, count: delayedCount, batch: batch, threads: threads,
            worker: "bench-slow", lags: nil)
        let slowStats = statsLine(d2)
        d2.stop()
        sink.setFaults(HTTP2ServerFaults())

        // Phase 5: claim cost, small vs large queue. Measured two ways:
        // - `claimP50Fresh`: each claim of 64 commits, then its operations are accepted and their
        //   targets get a new queued update (untimed), so every claim takes operations no claim
        //   touched before, as the dispatcher's claims do, and the queue keeps its size;
        // - `claimP50`: the same 64 heads claimed and rolled back 60 times (the queue stays as it
        //   is). Each rolled-back claim leaves a dead version of each of the 64 operations and an
        //   index entry for it beside the live one (its own update changes the index page, so the
        //   entries are never marked dead): by the median claim, each probe of an operation read
        //   ~42 buffers at 1,000 targets and ~65 at 1,000,000 (BENCH_CLAIM_PLANS=1), a cost no
        //   dispatcher claim pays. Kept, labelled, so runs stay comparable with earlier ones.
        struct Rollback: Error {}
        func medianMilliseconds(_ seconds: [Double]) -> Double { seconds.sorted()[seconds.count / 2] * 1000 }
        // The WAL position (bytes since 0/0), read outside the timed claim.
        func walPosition() throws -> Int64 {
            try h.db.system { c in
                try c.query("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8 AS b")[0].int64("b")
            }
        }
        func checkpoints() throws -> Int64 {
            try h.db.system { c in
                try c.query("SELECT checkpoints_timed + checkpoints_req AS n FROM pg_stat_bgwriter")[0].int64("n")
            }
        }
        /// A claim phase: the median claim (milliseconds), the mean WAL bytes per claim and the
        /// checkpoints started during the phase.
        struct ClaimPhase { var p50Ms = 0.0, walBytes = 0.0, checkpoints: Int64 = 0 }
        func claimP50Fresh(_ reps: Int, tenant: String) throws -> ClaimPhase {
            var times: [Double] = []
            var wal: Int64 = 0
            let checkpoints0 = try checkpoints()
            for rep in 0..<reps {
                let w0 = try walPosition()
                let t0 = Date()
                let ids = try h.db.system(settings: DispatchStore.claimSettings) { c in  // as the dispatcher claims
                    try DispatchStore.claim(c, worker: "claim-bench", limit: 64, leaseSeconds: 30, now: Date()).map(\.id)
                }
                times.append(Date().timeIntervalSince(t0))
                wal += try walPosition() - w0
                XCTAssertEqual(ids.count, 64)
                _ = try h.db.system { c in
                    try c.execute(
                        """
                        UPDATE operations SET status = 'accepted', accepted_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                               updated_at = now()
                         WHERE tenant_id = $1 AND id = ANY($2::text[])
                        """, [tenant, PostgresTextArray(ids)])
                    // Each of those targets gets a new queued update, so the queue keeps its size
                    // (1,000 targets, 1,000 queued) over any number of claims, and every claim
                    // still takes operation rows no claim touched.
                    try c.execute(
                        """
                        INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, state, priority,
                                                consumes_quota, quota_day)
                        SELECT o.tenant_id, o.id || '_r' || $3, o.target_id, o.seq + 1, 'update', 'queued', o.revision, true, o.state,
                               10, true, o.quota_day
                          FROM operations o WHERE o.tenant_id = $1 AND o.id = ANY($2::text[])
                        """, [tenant, PostgresTextArray(ids), String(rep)])
                }
            }
            return ClaimPhase(
                p50Ms: medianMilliseconds(times), walBytes: Double(wal) / Double(max(1, reps)), checkpoints: try checkpoints() - checkpoints0)
        }
        func claimP50(_ reps: Int) -> Double {
            var times: [Double] = []
            for _ in 0..<reps {
                _ = try? h.db.system(settings: DispatchStore.claimSettings) { c -> Int in  // as the dispatcher claims
                    let t0 = Date()
                    let n = try DispatchStore.claim(c, worker: "claim-bench", limit: 64, leaseSeconds: 30, now: Date()).count
                    times.append(Date().timeIntervalSince(t0))
                    XCTAssertEqual(n, 64)
                    throw Rollback()
                }
            }
            return medianMilliseconds(times)
        }
        // BENCH_CLAIM_PLANS=1: the plan of one such claim (EXPLAIN ANALYZE, BUFFERS, rolled back),
        // every line, labelled small or large, to see where the large queue's extra time goes.
        var claimPlans: [String] = []
        func explainClaim(_ label: String) {
            guard env("BENCH_CLAIM_PLANS", 0) == 1 else { return }
            _ = try? h.db.system(settings: DispatchStore.claimSettings) { c -> Int in
                for r in try c.query(
                    "EXPLAIN (ANALYZE, BUFFERS) " + DispatchStore.fairClaimSQL,
                    ["claim-plan", 64, 64, "0", 30.0, Timestamp.epochSeconds(Date()), "{}", 64])
                {
                    claimPlans.append("claim plan \(label): \(try r.string("QUERY PLAN"))")
                }
                throw Rollback()
            }
        }
        // Each target's clock row (`target_clocks`, written by its first claim), as if each had
        // been claimed before (its start was sent): so both sizes time the same claim. Without
        // it the small queue's 60 claims went round its 1,000 targets (the median claim found
        // their clocks), while the large queue's claims were every target's first (a clock
        // insert and its foreign-key check per row, ~0.3 ms of a 64-row claim in its plan).
        func seedClocks(_ tenant: String) throws {
            try h.db.tenant(tenant) { c in
                try c.execute("SET LOCAL statement_timeout = 0")  // set-up: 1,000,000 rows
                try c.execute(
                    """
                    INSERT INTO target_clocks (tenant_id, target_id, last_timestamp)
                    SELECT tenant_id, id, $2 FROM targets WHERE tenant_id = $1
                    """, [tenant, Timestamp.epochSeconds(Date()) - 3600])
            }
            // Vacuumed and analyzed now, outside a transaction (VACUUM cannot run in one): the
            // insert of 1,000,000 rows would otherwise start an autovacuum during the timed claims.
            try h.db.pool.withConnection { c in
                try c.execute("SET statement_timeout = 0")
                defer { _ = try? c.execute("RESET statement_timeout") }
                try c.execute("VACUUM (ANALYZE) target_clocks")
            }
        }
        var claimSmall = 0.0, claimLarge = 0.0, claimSmallRolledBack = 0.0, claimLargeRolledBack = 0.0
        var smallPhase = ClaimPhase(), largePhase = ClaimPhase()
        let largeTargets = env("BENCH_CLAIM_TARGETS", 1_000_000), largeQueued = env("BENCH_CLAIM_QUEUED", 100_000)
        let freshReps = 60
        if env("BENCH_CLAIM", 1) == 1 {
            let ts = try h.tenant(quota: 100_000_000), insts = try h.installation(ts)
            try h.loadQueue(tenant: ts, installation: insts, prefix: "small", count: 1000)
            try seedClocks(ts)
            smallPhase = try claimP50Fresh(freshReps, tenant: ts)
            claimSmall = smallPhase.p50Ms
            explainClaim("small")
            claimSmallRolledBack = claimP50(60)
            _ = try h.db.tenant(ts) { c in
                try c.execute("UPDATE operations SET status = 'cancelled' WHERE tenant_id = $1 AND status = 'queued'", [ts])
            }
            let tl = try h.tenant(quota: 100_000_000), il = try h.installation(tl)
            let t0 = Date()
            try h.loadQueue(tenant: tl, installation: il, prefix: "large", count: largeTargets, queued: largeQueued)
            try seedClocks(tl)
            print("bench: setup of \(largeTargets) targets, \(largeQueued) queued took \(String(format: "%.1f", Date().timeIntervalSince(t0))) s")
            largePhase = try claimP50Fresh(freshReps, tenant: tl)
            claimLarge = largePhase.p50Ms
            explainClaim("large")
            claimLargeRolledBack = claimP50(60)
        }

        // Phase 6: where a claim and an apply of 512 spend their time (EXPLAIN ANALYZE, BUFFERS:
        // trigger lines and totals; rolled back). BENCH_PROFILE=0 skips, =2 prints every plan line.
        var profile: [String] = []
        if env("BENCH_PROFILE", 1) >= 1 {
            let tp = try h.tenant(quota: 100_000_000), ip = try h.installation(tp)
            try h.loadQueue(tenant: tp, installation: ip, prefix: "prof", count: 512)
            let wholePlans = env("BENCH_PROFILE", 1) == 2  // every plan line, not only triggers and totals
            func keep(_ rows: [PostgresRow], _ label: String) throws {
                var first = true
                for r in rows {
                    let line = try r.string("QUERY PLAN").trimmingCharacters(in: .whitespaces)
                    if wholePlans || line.hasPrefix("Trigger") || line.hasPrefix("Execution Time") || (first && line.hasPrefix("Buffers:")) {
                        if line.hasPrefix("Buffers:") { first = false }
                        profile.append("profile \(label): \(line)")
                    }
                }
            }
            _ = try? h.db.system { c -> Int in
                try keep(
                    c.query(
                        "EXPLAIN (ANALYZE, BUFFERS) " + DispatchStore.fairClaimSQL,
                        ["profile", 512, 512, "0", 30.0, Timestamp.epochSeconds(Date()), "{}", 512]), "claim 512")
                try keep(
                    c.query(
                        """
                        EXPLAIN (ANALYZE, BUFFERS) UPDATE operations o SET status = 'accepted', accepted_at = now(), lease_owner = NULL,
                               lease_expires_at = NULL, updated_at = now()
                         WHERE o.tenant_id = $1 AND o.status = 'sending' AND o.lease_owner = 'profile'
                        """, [tp]), "apply 512 accepted")
                throw Rollback()
            }
        }

        let ratio = h2loadRate.map { String(format: "%.3f", pushesPerSecond / $0) } ?? "n/a"
        let report = """
            == dispatch bench (\(ProcessInfo.processInfo.activeProcessorCount) cores shared by PostgreSQL, dispatcher, sink and h2load)
            loadavg=\(loadStart) (start) \(Self.loadavg()) (end)
            dispatcher: \(count) queued updates, \(threads) submitter threads, \(env("BENCH_APPLIERS", DispatcherConfiguration().applierThreads)) appliers, claim/apply batch \(batch), \(poolConnections) HTTP/2+TLS connections to a loopback sink
            dispatch_pushes_per_second=\(String(format: "%.0f", pushesPerSecond)) (\(count) results committed in \(String(format: "%.2f", drainSeconds)) s)
            streams_in_flight_max=\(streamsMax)
            drain: \(drainStats)
            backlog commit->request lag: p50 \(pct(backlogLags, 0.5)) p99 \(pct(backlogLags, 0.99)) (queueing behind the backlog)
            live commit->request lag (\(liveCount) commits at ~\(Int(liveRate))/s, achieved \(String(format: "%.0f", Double(liveCount) / liveSeconds))/s, \(errors.load(ordering: .relaxed)) write errors): p50 \(pct(liveLags, 0.5)) p99 \(pct(liveLags, 0.99))
            \(liveStats)
            h2load same body, same sink (-c \(poolConnections) -m \(perConnection)): \(h2loadLine)
            ratio_dispatch_to_h2load=\(ratio)
            delayed sink (\(delayMs) ms per response, \(delayedCount) updates): delayed_pushes_per_second=\(String(format: "%.0f", Double(delayedCount) / slowSeconds)) streams_in_flight_max_delayed=\(slowStreams)
            delayed: \(slowStats)
            claim_ms_p50_small=\(String(format: "%.2f", claimSmall)) (1000 targets, 1000 queued, limit 64, \(freshReps) claims committed, each of operations no earlier claim touched, targets claimed before)
            claim_ms_p50_large=\(String(format: "%.2f", claimLarge)) (\(largeTargets) targets, \(largeQueued) queued, limit 64, likewise)
            claim_wal_bytes_small=\(String(format: "%.0f", smallPhase.walBytes)) claim_wal_bytes_large=\(String(format: "%.0f", largePhase.walBytes)) (WAL written per committed claim of 64, mean, from the WAL insert position around each claim; checkpoints started during the claims: small \(smallPhase.checkpoints), large \(largePhase.checkpoints))
            claim_ms_p50_small_rolled_back=\(String(format: "%.2f", claimSmallRolledBack)) claim_ms_p50_large_rolled_back=\(String(format: "%.2f", claimLargeRolledBack)) claim_ratio_rolled_back=\(claimSmallRolledBack > 0 ? String(format: "%.2f", claimLargeRolledBack / claimSmallRolledBack) : "n/a") (the same 64 heads claimed and rolled back 60 times: the method of the figures before 2026-12-05)
            \(profile.joined(separator: "\n"))
            \(claimPlans.joined(separator: "\n"))
            claim_ratio_large_to_small=\(claimSmall > 0 ? String(format: "%.2f", claimLarge / claimSmall) : "n/a")
            """
        print(report)
        try? (report + "\n").write(
            toFile: ProcessInfo.processInfo.environment["BENCH_REPORT"] ?? (NSTemporaryDirectory() + "dispatch-bench.txt"),
            atomically: true, encoding: .utf8)
    }
}

/// The smallest APNs-shaped sender: POST /3/device/<token> with docs/providers.md headers (no JWT) to
/// the sink, event-driven (`submit` returns at once; the pool's connection threads complete).
final class SinkSender: PushSender, @unchecked Sendable {  // Atomic and Shared are thread-safe
    let pool: HTTP2ConnectionPool
    let answered = Atomic<Int>(0)
    let sampleBody = Shared<[UInt8]>([])
    init(pool: HTTP2ConnectionPool) { self.pool = pool }

    var isEventDriven: Bool { true }

    func send(_ push: OutgoingPush) -> PushResult {
        let done = DispatchSemaphore(value: 0)
        let box = Shared<PushResult?>(nil)
        submit(push, written: nil) { r in
            box.m.withLock { $0 = r }; done.signal()
        }
        done.wait()
        return box.m.withLock { $0! }
    }

    func submit(_ push: OutgoingPush, written: (@Sendable () -> Void)?, completion: @escaping @Sendable (PushResult) -> Void) {
        let body = push.apnsBody ?? push.fcmBody ?? []
        var headers = APNsPayload.headers(topicBundleId: push.appId, priority: push.priority, expiration: push.expiration, apnsId: push.apnsId)
        headers.append(("content-type", "application/json"))
        let req = HTTP2Request(method: "POST", path: "/3/device/\(push.deviceToken)", headers: headers, body: body)
        pool.submit(req, onWritten: written) { [self] result in
            switch result {
            case .success(let r):
                if answered.wrappingAdd(1, ordering: .relaxed).newValue == 1 { sampleBody.m.withLock { $0 = body } }
                completion(r.status == 200 ? .outcome(.accepted(providerId: r.header("apns-id"))) : .outcome(.retry(after: nil)))
            case .failure(let f):
                completion(f.isSafeToResend ? .notProcessed("\(f)") : .possiblyProcessed("\(f)"))
            }
        }
    }
}
