import Foundation
import XCTest
import Crypto
import Delivery
import HTTP2
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres
import Synchronization

/// `deploy/bench/dispatch`: drains 20,000 queued updates through the dispatcher into a local
/// HTTP/2 sink (TLS, answers 200 at once) via a minimal APNs-shaped `PushSender`, then runs
/// `h2load` with the same body against the same sink, and measures commit → request lag in a
/// live phase. Runs only with `LIVERELAY_BENCH_DISPATCH=1`. Loopback only, bounded.
final class DispatchBenchTests: XCTestCase {
    func env(_ k: String, _ d: Int) -> Int { ProcessInfo.processInfo.environment[k].flatMap(Int.init) ?? d }

    func testDrainQueuedUpdatesIntoHTTP2Sink() throws {
        let count = env("BENCH_OPERATIONS", 20_000)
        let threads = env("BENCH_SENDER_THREADS", 64)
        let batch = env("BENCH_BATCH", 128)
        let h = try DispatchHarness.make()
        defer { h.tearDown() }

        // Sink: HTTP/2 over TLS on loopback, 200 at once.
        let ca = try X509.makeCertificateAuthority(commonName: "dispatch bench CA")
        let serverId = try X509.issueServerCertificate(ca: ca, hosts: ["127.0.0.1", "localhost"])
        let caFile = NSTemporaryDirectory() + "dispatch-bench-ca-\(getpid()).pem"
        try ca.certificatePEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        let received = Atomic<Int>(0)
        let sink = HTTP2Server(configuration: HTTP2ServerConfiguration(certificatePEM: serverId.certificatePEM, privateKeyPEM: serverId.privateKeyPEM,
                                                                       maxConcurrentStreams: 1000)) { req in
            received.wrappingAdd(1, ordering: .relaxed)
            return HTTP2Response(status: 200, headers: [("apns-id", req.header("apns-id") ?? "")])
        }
        try sink.start()
        defer { sink.stop() }
        let pool = HTTP2ConnectionPool(configuration: HTTP2ClientConfiguration(baseURL: URL(string: "https://127.0.0.1:\(sink.port)")!,
                                                                              extraCAFile: caFile, requestTimeoutSeconds: 30), maxConnections: 2)
        defer { pool.close() }
        let sender = SinkSender(pool: pool)

        // 20,000 ready iOS targets, one queued state-only update each (as the write path leaves them).
        let t = try h.tenant(quota: 10_000_000)
        let inst = try h.installation(t)
        let setup = Date()
        try h.db.tenant(t) { c in
            let day = QuotaStore.day(Date())
            try c.execute("""
                INSERT INTO targets (tenant_id, id, installation_id, origin, activity_type, template_version, status, revision, state,
                                     push_token, token_status, op_seq)
                SELECT $1, 'tgt_bench' || lpad(g::text, 8, '0'), $2, 'local', 'delivery', 'tv_test', 'ready', 2,
                       jsonb_build_object('eta', g % 60, 'driver', 'Ana', 'stop', g), lpad(to_hex(g), 64, '0'), 'registered', 1
                  FROM generate_series(1, $3) g
                """, [t, inst, count])
            try c.execute("""
                INSERT INTO operations (tenant_id, id, target_id, seq, kind, status, revision, has_state, state, priority, consumes_quota, quota_day)
                SELECT $1, 'op_bench' || lpad(g::text, 8, '0'), 'tgt_bench' || lpad(g::text, 8, '0'), 1, 'update', 'queued', 2, true,
                       jsonb_build_object('eta', g % 60, 'driver', 'Ana', 'stop', g), 10, true, $3::date
                  FROM generate_series(1, $2) g
                """, [t, count, day])
            try c.execute("ANALYZE operations"); try c.execute("ANALYZE targets")
        }
        print("bench: setup of \(count) targets + queued updates took \(String(format: "%.1f", Date().timeIntervalSince(setup))) s")

        // Phase 1: drain the backlog.
        let lags = Shared<[Double]>([])
        let config = DispatcherConfiguration(workerId: "bench", senderThreads: threads, claimBatchSize: batch, applyBatchSize: batch,
                                             maxOutstanding: max(2 * threads, batch * 2), leaseSeconds: 30, pollSeconds: 1,
                                             lagObserver: { l in lags.m.withLock { $0.append(l) } })
        let d = Dispatcher(db: h.db, conninfo: h.conninfo, sender: sender, configuration: config, metrics: h.metrics, log: h.logger)
        h.dispatchers.append(d)
        let started = Date()
        d.start()
        var sentAll: Date?
        while Date().timeIntervalSince(started) < 300 {
            if sentAll == nil && sender.sent.load(ordering: .relaxed) >= count { sentAll = Date() }
            if sentAll != nil && d.outstandingCount == 0 { break }
            Thread.sleep(forTimeInterval: 0.01)
        }
        let drained = Date()
        let accepted = try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status = 'accepted'", [t]).int("n")
        XCTAssertEqual(accepted, count)
        XCTAssertEqual(received.load(ordering: .relaxed), count, "each update reached the sink exactly once")
        let sendSeconds = (sentAll ?? drained).timeIntervalSince(started)
        let drainSeconds = drained.timeIntervalSince(started)
        let backlogLags = lags.m.withLock { $0 }.sorted()

        // Phase 2: live commits at a steady rate through the write path → commit-to-request lag.
        lags.m.withLock { $0.removeAll() }
        let liveTargets = try (0..<50).map { i in try h.target(t, installation: inst, token: String(format: "%064x", 900_000 + i)) }
        let liveCount = env("BENCH_LIVE_OPERATIONS", 1000)
        let liveStart = Date()
        for i in 0..<liveCount {
            try h.update(t, target: liveTargets[i % liveTargets.count], state: ["eta": .int(Int64(i))])
            let due = liveStart.addingTimeInterval(Double(i + 1) / 200)  // ~200 commits/s
            let wait = due.timeIntervalSinceNow
            if wait > 0 { Thread.sleep(forTimeInterval: wait) }
        }
        try h.eventually(within: 60, "live phase done") {
            try h.row("SELECT count(*) AS n FROM operations WHERE tenant_id = $1 AND status IN ('queued', 'sending')", [t]).int("n") == 0
        }
        let liveLags = lags.m.withLock { $0 }.sorted()

        // Phase 3: h2load, same body and headers, same sink.
        let body = sender.sampleBody.m.withLock { $0 }
        let bodyFile = NSTemporaryDirectory() + "dispatch-bench-body-\(getpid()).json"
        try Data(body).write(to: URL(fileURLWithPath: bodyFile))
        var h2loadLine = "h2load: not installed"
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/h2load") {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/h2load")
            p.arguments = ["-n", String(count), "-c", "2", "-m", String(min(threads, 100)), "-t", "1", "-d", bodyFile,
                           "-H", "apns-topic: com.example.app.push-type.liveactivity", "-H", "apns-push-type: liveactivity",
                           "-H", "apns-priority: 10", "-H", "content-type: application/json",
                           "https://127.0.0.1:\(sink.port)/3/device/\(String(repeating: "ab", count: 32))"]
            let out = Pipe()
            p.standardOutput = out; p.standardError = out
            try p.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            h2loadLine = text.split(separator: "\n").first { $0.hasPrefix("finished in") }.map(String.init) ?? "h2load failed: \(text.suffix(400))"
        }

        func pct(_ a: [Double], _ p: Double) -> String {
            guard !a.isEmpty else { return "n/a" }
            return String(format: "%.1f ms", a[min(a.count - 1, Int(Double(a.count) * p))] * 1000)
        }
        let report = """
            == dispatch bench (\(ProcessInfo.processInfo.activeProcessorCount) cores shared by PostgreSQL, dispatcher, sink and h2load)
            dispatcher: \(count) queued updates, \(threads) sender threads, claim/apply batch \(batch), HTTP/2+TLS sink on loopback
            dispatch_pushes_per_second=\(String(format: "%.0f", Double(count) / sendSeconds)) (all requests sent in \(String(format: "%.2f", sendSeconds)) s)
            dispatch_drain_seconds=\(String(format: "%.2f", drainSeconds)) (until every result was committed)
            backlog commit->request lag: p50 \(pct(backlogLags, 0.5)) p99 \(pct(backlogLags, 0.99)) (queueing behind the backlog)
            live commit->request lag (\(liveCount) commits at ~200/s): p50 \(pct(liveLags, 0.5)) p99 \(pct(liveLags, 0.99))
            h2load same body, same sink (-c 2 -m \(min(threads, 100))): \(h2loadLine)
            """
        print(report)
        try? report.write(toFile: ProcessInfo.processInfo.environment["BENCH_REPORT"] ?? (NSTemporaryDirectory() + "dispatch-bench.txt"),
                          atomically: true, encoding: .utf8)
    }
}

/// The smallest APNs-shaped sender: POST /3/device/<token> with SPEC §8 headers (no JWT) to the sink.
final class SinkSender: PushSender, @unchecked Sendable {  // Atomic and Shared are thread-safe
    let pool: HTTP2ConnectionPool
    let sent = Atomic<Int>(0)
    let sampleBody = Shared<[UInt8]>([])
    init(pool: HTTP2ConnectionPool) { self.pool = pool }

    func send(_ push: OutgoingPush) -> PushResult {
        let body = push.apnsBody ?? push.fcmBody ?? []
        var headers = APNsPayload.headers(topicBundleId: push.appId, priority: push.priority, expiration: push.expiration, apnsId: push.apnsId)
        headers.append(("content-type", "application/json"))
        let req = HTTP2Request(method: "POST", path: "/3/device/\(push.deviceToken)", headers: headers, body: body)
        do {
            let r = try pool.send(req)
            if sent.wrappingAdd(1, ordering: .relaxed).newValue == 1 { sampleBody.m.withLock { $0 = body } }
            return r.status == 200 ? .outcome(.accepted(providerId: r.header("apns-id"))) : .outcome(.retry(after: nil))
        } catch let f as HTTP2Failure {
            return f.isSafeToResend ? .notProcessed("\(f)") : .possiblyProcessed("\(f)")
        } catch {
            return .possiblyProcessed("\(error)")
        }
    }
}
