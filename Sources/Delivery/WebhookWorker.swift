import Foundation
import Crypto
import JSON
import LiveRelayCore
import LiveRelayStore
import Logging
import Metrics
import Postgres

/// Settings of the webhook delivery worker (docs/webhooks.md "Delivery").
public struct WebhookWorkerConfiguration: Sendable {
    /// Lease owner name (as the dispatcher's worker id).
    public var workerId: String
    /// Sender threads, i.e. attempts in flight at once.
    public var concurrency: Int
    /// Most attempts in flight to one endpoint, so a slow receiver cannot take every thread
    /// (default: half the threads, at least 1).
    public var perEndpointInFlight: Int
    /// Most attempts in flight for one tenant, whatever its number of endpoints, so one
    /// tenant's slow receivers cannot hold another tenant's deliveries (default: half the
    /// threads, at least 1).
    public var perTenantInFlight: Int
    /// How often the claimer looks for due deliveries when idle, seconds.
    public var pollIntervalSeconds: Double = 0.05
    /// How long a claimed delivery is leased, seconds (≥ the HTTP total timeout): a worker that
    /// dies leaves it due again after this.
    public var leaseSeconds: Double = 60
    /// `User-Agent` of every request.
    public var userAgent: String = "LiveRelay/\(Capabilities.protocolVersion)"
    public init(workerId: String, concurrency: Int = 8) {
        self.workerId = workerId
        self.concurrency = concurrency
        perEndpointInFlight = max(1, concurrency / 2)
        perTenantInFlight = max(1, concurrency / 2)
    }
}

/// Delivers queued webhook deliveries (docs/webhooks.md "Delivery"), at least once: a claimer
/// thread leases due deliveries fairly (round-robin over tenants, then over a tenant's
/// endpoints; at most `perTenantInFlight` per tenant and `perEndpointInFlight` per endpoint,
/// `WebhookStore.claim`) and hands them to `concurrency` sender threads, each of
/// which signs the event afresh (`WebhookSignature`, every active secret), POSTs it through
/// `WebhookHTTPClient` and records the attempt and its consequence (delivered, retry after
/// `WebhookRules.retryDelay`, given up, endpoint disabled) in one transaction. The clock and the
/// jitter source are injected (tests drive the retry schedule).
///
/// Metrics: `liverelay_webhook_deliveries_total{result}` (result = `delivered`, `retry`,
/// `gave_up`, `lease_lost`, one per attempt) and `liverelay_webhook_delivery_lag_seconds`
/// (event creation → successful delivery).
///
/// `@unchecked Sendable`: the queue and counters are only touched under `condition`.
public final class WebhookWorker: @unchecked Sendable {
    let db: Database
    let kek: AESGCM
    let client: WebhookHTTPClient
    public let configuration: WebhookWorkerConfiguration
    let log: Logger
    let now: @Sendable () -> Date
    let random: @Sendable () -> Double
    let deliveries: Counter
    let lag: Histogram
    private let condition = NSCondition()
    private var queue: [WebhookJob] = []
    private var inFlight: [String: Int] = [:]  // by endpoint id: claimed, queued or being attempted
    private var tenantInFlight: [String: Int] = [:]  // the same by tenant id
    private var total = 0
    private var stopping = false
    private var threads = 0

    public init(
        db: Database, kek: AESGCM, client: WebhookHTTPClient, configuration: WebhookWorkerConfiguration, metrics: MetricsRegistry,
        log: Logger, now: @escaping @Sendable () -> Date = Date.init,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.db = db
        self.kek = kek
        self.client = client
        self.configuration = configuration
        self.log = log.with(["component": "webhooks"])
        self.now = now
        self.random = random
        deliveries = metrics.counter("liverelay_webhook_deliveries_total", help: "Webhook delivery attempts by result", labels: ["result"])
        lag = metrics.histogram(
            "liverelay_webhook_delivery_lag_seconds", help: "Event creation to its successful webhook delivery",
            labels: [], buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400])
    }

    /// Starts the claimer and the sender threads.
    public func start() {
        condition.lock()
        threads = configuration.concurrency + 1
        condition.unlock()
        let claimer = Thread { [self] in claimLoop() }
        claimer.name = "liverelay-webhook-claimer"
        claimer.start()
        for i in 0..<configuration.concurrency {
            let t = Thread { [self] in sendLoop() }
            t.name = "liverelay-webhook-\(i)"
            t.start()
        }
        log.info("webhook worker started", ["concurrency": .int(Int64(configuration.concurrency))])
    }

    /// Stops claiming, lets attempts in flight finish (each is bounded by the HTTP timeout) and
    /// waits up to `timeoutSeconds` for the threads. Deliveries claimed but not attempted stay
    /// leased and come due again when their lease ends.
    public func stop(timeoutSeconds: Double = 20) {
        condition.lock()
        stopping = true
        queue.removeAll()
        condition.broadcast()
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while threads > 0 && Date() < deadline { _ = condition.wait(until: deadline) }
        condition.unlock()
    }

    private func exitThread() {
        condition.lock()
        threads -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func claimLoop() {
        defer { exitThread() }
        while true {
            condition.lock()
            if stopping { condition.unlock(); return }
            let free = configuration.concurrency - total - queue.count
            let shares = WebhookClaimShares(
                perEndpoint: configuration.perEndpointInFlight, perTenant: configuration.perTenantInFlight,
                inFlightByEndpoint: inFlight, inFlightByTenant: tenantInFlight)
            condition.unlock()
            var claimed: [WebhookJob] = []
            if free > 0 {
                do {
                    claimed = try db.system { c in
                        try WebhookStore.claim(
                            c, owner: configuration.workerId, now: now(), limit: free,
                            leaseSeconds: configuration.leaseSeconds, shares: shares)
                    }
                } catch {
                    log.warning("webhook claim failed", ["error": .string(String(describing: error))])
                }
            }
            condition.lock()
            for j in claimed {
                inFlight[j.endpointId, default: 0] += 1
                tenantInFlight[j.tenantId, default: 0] += 1
            }
            queue.append(contentsOf: claimed)
            condition.broadcast()
            if claimed.isEmpty || configuration.concurrency - total - queue.count <= 0 {
                _ = condition.wait(until: Date().addingTimeInterval(configuration.pollIntervalSeconds))
            }
            condition.unlock()
        }
    }

    private func sendLoop() {
        let connection = WebhookConnection()
        defer { connection.close(); exitThread() }
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            if stopping { condition.unlock(); return }
            let job = queue.removeFirst()
            total += 1
            condition.unlock()
            deliver(job, connection: connection)
            condition.lock()
            total -= 1
            inFlight[job.endpointId, default: 1] -= 1
            if inFlight[job.endpointId] == 0 { inFlight[job.endpointId] = nil }
            tenantInFlight[job.tenantId, default: 1] -= 1
            if tenantInFlight[job.tenantId] == 0 { tenantInFlight[job.tenantId] = nil }
            condition.broadcast()
            condition.unlock()
        }
    }

    /// One attempt of `job`, recorded. Errors of the database are logged; the delivery's lease
    /// then runs out and it is attempted again (at least once).
    func deliver(_ job: WebhookJob, connection: WebhookConnection? = nil) {
        do {
            let secrets = try db.system { c in
                try WebhookStore.activeSecrets(c, tenantId: job.tenantId, endpointId: job.endpointId, now: now(), kek: kek)
            }
            let body = job.event.json.serialized()
            let t = Int64(now().timeIntervalSince1970.rounded(.down))
            let headers = [
                ("Content-Type", "application/json"), ("User-Agent", configuration.userAgent),
                ("LiveRelay-Event-Id", job.eventId),
                ("LiveRelay-Signature", WebhookSignature.header(timestamp: t, secrets: secrets, body: body))
            ]
            let outcome = client.post(url: job.url, headers: headers, body: body, connection: connection)
            let at = now()
            let done = try db.system { c in
                try WebhookStore.complete(c, job: job, owner: configuration.workerId, outcome: outcome, now: at, random: random())
            }
            switch done {
            case .delivered:
                deliveries.increment(["delivered"])
                lag.observe([], max(0, at.timeIntervalSince(job.event.createdAt)))
            case .retry: deliveries.increment(["retry"])
            case .gaveUp:
                deliveries.increment(["gave_up"])
                log.warning(
                    "webhook delivery given up",
                    [
                        "endpoint_id": .string(job.endpointId), "event_id": .string(job.eventId),
                        "attempts": .int(Int64(job.attempts + 1))
                    ])
            case .leaseLost: deliveries.increment(["lease_lost"])
            }
            if !outcome.delivered {
                log.info(
                    "webhook attempt failed",
                    [
                        "endpoint_id": .string(job.endpointId), "event_id": .string(job.eventId),
                        "attempt": .int(Int64(job.attempts + 1)), "error": .string(outcome.error ?? "")
                    ])
            }
        } catch {
            log.error(
                "webhook delivery failed to record",
                [
                    "endpoint_id": .string(job.endpointId), "event_id": .string(job.eventId),
                    "error": .string(String(describing: error))
                ])
        }
    }
}
