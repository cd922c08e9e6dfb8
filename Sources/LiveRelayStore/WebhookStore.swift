import Foundation
import Crypto
import JSON
import LiveRelayCore
import Postgres

/// One webhook endpoint (docs/webhooks.md "Endpoints"). Its secrets live apart, sealed.
public struct WebhookEndpointRecord: Sendable, Equatable, RowDecodable {
    public let id: String
    public let url: String
    public let events: [String]
    public let description: String
    public let status: String
    public let disabledReason: String?
    public let failingSince: Date?
    public let createdAt: Date
    public let updatedAt: Date
}

/// One delivery attempt of the delivery log.
public struct WebhookAttemptRecord: Sendable, Equatable, RowDecodable {
    public let id: Int64
    public let eventId: String
    public let eventType: String
    public let attempt: Int
    public let statusCode: Int?
    public let error: String?
    public let durationMs: Int
    public let deliveredAt: Date
}

/// A claimed delivery: what the worker needs to send one attempt.
public struct WebhookJob: Sendable, Equatable {
    public let tenantId: String
    public let endpointId: String
    public let eventId: String
    public let eventType: String
    /// Attempts made before this one.
    public let attempts: Int
    public let url: String
    public let event: EventRecord
    /// When the delivery was queued (its age decides when retries stop).
    public let createdAt: Date

    init(row r: PostgresRow) throws {
        tenantId = try r.string("tenant_id"); endpointId = try r.string("endpoint_id"); eventId = try r.string("event_id")
        eventType = try r.string("event_type"); attempts = try r.int("attempts"); url = try r.string("url")
        createdAt = try r.date("created_at"); event = try EventRecord(row: r, prefix: "ev_")
    }
}

extension EventRecord {
    init(row r: PostgresRow, prefix: String) throws {
        id = try r.string(prefix + "id"); type = try r.string(prefix + "type"); targetId = try r.optionalString(prefix + "target_id")
        channelId = try r.optionalString(prefix + "channel_id"); createdAt = try r.date(prefix + "created_at")
        data = (try? JSONValue.parse(Array(try r.string(prefix + "data").utf8))) ?? .object([:])
    }
}

/// What one attempt came to, as the worker saw it.
public struct WebhookAttemptOutcome: Sendable, Equatable {
    /// HTTP status, nil when no response arrived.
    public var statusCode: Int?
    /// Why it failed (no secret, no body), nil on success.
    public var error: String?
    /// Wall time of the attempt, milliseconds.
    public var durationMs: Int
    public var delivered: Bool { error == nil && (statusCode.map { (200..<300).contains($0) } ?? false) }
    public init(statusCode: Int?, error: String?, durationMs: Int) {
        self.statusCode = statusCode; self.error = error; self.durationMs = durationMs
    }
}

/// What `WebhookStore.complete` decided.
public enum WebhookCompletion: Sendable, Equatable {
    case delivered
    case retry(at: Date)
    case gaveUp
    /// The lease was lost (another worker took the delivery over); nothing changed but the log.
    case leaseLost
}

/// SQL for webhook endpoints, their sealed secrets, the delivery queue and the delivery log
/// (docs/webhooks.md). Every statement names the tenant; RLS is the second wall.
public enum WebhookStore {
    static let columns = "id, url, events, description, status, disabled_reason, failing_since, created_at, updated_at"
    /// The columns of a `WebhookAttemptRecord` (the delivery log).
    static let attemptColumns = "id, event_id, event_type, attempt, status_code, error, duration_ms, delivered_at"

    /// A new signing secret: `whsec_` + base64url of 32 random bytes (256 bits).
    public static func newSecret() -> String { "whsec_" + Base64URL.encode(SecureRandom.bytes(32)) }

    static func aad(_ tenant: String, _ endpoint: String, _ secretId: String) -> [UInt8] {
        Array("webhook-secret|\(tenant)|\(endpoint)|\(secretId)".utf8)
    }

    public static func insertEndpoint(
        _ c: PostgresConnection, tenantId: String, id: String, url: String, events: [String],
        description: String
    ) throws -> WebhookEndpointRecord {
        try WebhookEndpointRecord(
            row: c.query(
                """
                INSERT INTO webhook_endpoints (tenant_id, id, url, events, description) VALUES ($1, $2, $3, $4, $5) RETURNING \(columns)
                """, [tenantId, id, url, PostgresTextArray(events), description])[0])
    }

    /// Stores `secret` sealed (AES-256-GCM under `kek`, bound to its row) as a signing secret
    /// of the endpoint, valid until `expiresAt` (nil: until rotated).
    public static func addSecret(_ c: PostgresConnection, tenantId: String, endpointId: String, secret: String, kek: AESGCM) throws {
        let sid = Identifier.makeBody()
        let sealed = try kek.seal(Array(secret.utf8), associatedData: aad(tenantId, endpointId, sid))
        try c.execute(
            "INSERT INTO webhook_secrets (tenant_id, endpoint_id, id, secret_sealed) VALUES ($1, $2, $3, $4)",
            [tenantId, endpointId, sid, sealed])
    }

    /// Rotation: every secret still signing at `now` stops signing at `expiresAt` (or keeps its
    /// earlier expiry). Call before `addSecret` of the new one.
    public static func expireSecrets(_ c: PostgresConnection, tenantId: String, endpointId: String, now: Date, expiresAt: Date) throws {
        try c.execute(
            """
            UPDATE webhook_secrets SET expires_at = LEAST(COALESCE(expires_at, $4), $4)
             WHERE tenant_id = $1 AND endpoint_id = $2 AND (expires_at IS NULL OR expires_at > $3)
            """, [tenantId, endpointId, now, expiresAt])
    }

    /// The secrets that sign at `now`, newest first, opened.
    /// - Throws: `CryptoError` when a sealed secret does not open under `kek`.
    public static func activeSecrets(_ c: PostgresConnection, tenantId: String, endpointId: String, now: Date, kek: AESGCM) throws -> [String] {
        try c.query(
            """
            SELECT id, secret_sealed FROM webhook_secrets
             WHERE tenant_id = $1 AND endpoint_id = $2 AND (expires_at IS NULL OR expires_at > $3) ORDER BY id DESC
            """, [tenantId, endpointId, now]
        ).map { r in
            String(
                decoding: try kek.open(try r.bytes("secret_sealed"), associatedData: aad(tenantId, endpointId, try r.string("id"))),
                as: UTF8.self)
        }
    }

    public static func endpoint(_ c: PostgresConnection, tenantId: String, id: String) throws -> WebhookEndpointRecord? {
        try c.query("SELECT \(columns) FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2", [tenantId, id])
            .first.map(WebhookEndpointRecord.init(row:))
    }

    public static func listEndpoints(_ c: PostgresConnection, tenantId: String, limit: Int, after: String?) throws -> Page<WebhookEndpointRecord> {
        try Page.ascendingById(
            c, table: "webhook_endpoints", columns: columns, tenantId: tenantId, after: after, limit: limit, id: \.id,
            decode: WebhookEndpointRecord.init(row:))
    }

    /// Changes the given fields (nil: unchanged). Enabling clears `disabled_reason` and the
    /// failure streak; disabling by the tenant sets `disabled_reason` to `"manual"`.
    public static func updateEndpoint(
        _ c: PostgresConnection, tenantId: String, id: String, url: String?, events: [String]?,
        description: String?, status: String?
    ) throws -> WebhookEndpointRecord? {
        try c.query(
            """
            UPDATE webhook_endpoints SET url = COALESCE($3, url), events = COALESCE($4, events), description = COALESCE($5, description),
                   disabled_reason = CASE WHEN $6::text IS NULL OR $6 = status THEN disabled_reason WHEN $6 = 'enabled' THEN NULL ELSE 'manual' END,
                   failing_since = CASE WHEN $6 = 'enabled' AND status = 'disabled' THEN NULL ELSE failing_since END,
                   status = COALESCE($6, status), updated_at = now()
             WHERE tenant_id = $1 AND id = $2 RETURNING \(columns)
            """, [tenantId, id, url, events.map(PostgresTextArray.init), description, status]
        ).first.map(WebhookEndpointRecord.init(row:))
    }

    /// Deletes the endpoint with its secrets, queued deliveries and log. False when absent.
    public static func deleteEndpoint(_ c: PostgresConnection, tenantId: String, id: String) throws -> Bool {
        try c.execute("DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2", [tenantId, id]) > 0
    }

    /// Queues `event` for this endpoint alone (webhook.test), due now.
    public static func queueDelivery(_ c: PostgresConnection, tenantId: String, endpointId: String, event: EventRecord) throws {
        try c.execute(
            """
            INSERT INTO webhook_deliveries (tenant_id, endpoint_id, event_id, event_type, event_created_at) VALUES ($1, $2, $3, $4, $5)
            """, [tenantId, endpointId, event.id, event.type, event.createdAt])
    }

    /// The endpoint's delivery log, newest first (`before`: the id of the last attempt of the previous page).
    public static func attempts(
        _ c: PostgresConnection, tenantId: String, endpointId: String, limit: Int, before: Int64?
    ) throws -> Page<WebhookAttemptRecord> {
        var w = KeysetConditions()
        w.add("tenant_id = ?", tenantId)
        w.add("endpoint_id = ?", endpointId)
        if let before { w.add("id < ?::bigint", before) }
        let rows = try c.query(
            "SELECT \(attemptColumns) FROM webhook_attempts WHERE \(w.clause) ORDER BY id DESC LIMIT \(w.bind(limit + 1))", w.params
        ).map(WebhookAttemptRecord.init(row:))
        return Page.from(rows, limit: limit, id: { String($0.id) })
    }

    /// Claims up to `limit` due deliveries (system scope) for `owner`, leasing each for
    /// `leaseSeconds` by moving its due time: a worker that dies mid-attempt leaves the delivery
    /// due again when the lease ends (at least once). Only enabled endpoints are served
    /// (webhook.test also reaches a disabled one).
    ///
    /// Fair per tenant, then per endpoint (docs/webhooks.md "Delivery"): a claim adds at most
    /// `shares.perEndpoint` minus what is in flight to an endpoint, and at most `shares.perTenant`
    /// minus what is in flight for its tenant, and takes deliveries round-robin — every tenant's
    /// first before any tenant's second, and within a tenant every endpoint's first before any
    /// endpoint's second. So one tenant's slow endpoints never hold more than its share of the
    /// worker's threads. Candidates are taken per endpoint (migration 0028): each enabled
    /// endpoint's earliest due deliveries, up to `shares.perEndpoint`, and each other endpoint's
    /// due `webhook.test` deliveries; so neither another tenant's backlog nor deliveries of a
    /// disabled endpoint (they stay pending) can crowd an endpoint out of the candidates.
    public static func claim(
        _ c: PostgresConnection, owner: String, now: Date, limit: Int, leaseSeconds: Double,
        shares: WebhookClaimShares
    ) throws -> [WebhookJob] {
        let endpoints = shares.inFlightByEndpoint.sorted { $0.key < $1.key }
        let tenants = shares.inFlightByTenant.sorted { $0.key < $1.key }
        return try c.query(
            """
            WITH cand AS (
              SELECT d.tenant_id, d.endpoint_id, d.event_id, d.next_attempt_at,
                     row_number() OVER (PARTITION BY d.tenant_id, d.endpoint_id ORDER BY d.next_attempt_at, d.event_id) AS rn_e
                FROM (SELECT x.* FROM webhook_endpoints e
                       CROSS JOIN LATERAL (
                             SELECT d.tenant_id, d.endpoint_id, d.event_id, d.next_attempt_at FROM webhook_deliveries d
                              WHERE d.tenant_id = e.tenant_id AND d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= $1
                              ORDER BY d.next_attempt_at LIMIT $9) x
                      WHERE e.status = 'enabled'
                      UNION ALL
                      SELECT x.* FROM webhook_endpoints e
                       CROSS JOIN LATERAL (
                             SELECT d.tenant_id, d.endpoint_id, d.event_id, d.next_attempt_at FROM webhook_deliveries d
                              WHERE d.tenant_id = e.tenant_id AND d.endpoint_id = e.id AND d.status = 'pending'
                                AND d.event_type = 'webhook.test' AND d.next_attempt_at <= $1
                              ORDER BY d.next_attempt_at LIMIT $9) x
                      WHERE e.status <> 'enabled') d
            ), endpoint_ok AS (
              SELECT cand.*, row_number() OVER (PARTITION BY cand.tenant_id ORDER BY cand.rn_e, cand.next_attempt_at, cand.event_id) AS rn_t
                FROM cand LEFT JOIN unnest($5::text[], $6::text[]::int[]) AS f(endpoint_id, n) ON f.endpoint_id = cand.endpoint_id
               WHERE cand.rn_e <= $9 - COALESCE(f.n, 0)
            ), due AS (
              SELECT endpoint_ok.* FROM endpoint_ok
                LEFT JOIN unnest($7::text[], $8::text[]::int[]) AS f(tenant_id, n) ON f.tenant_id = endpoint_ok.tenant_id
               WHERE endpoint_ok.rn_t <= $10 - COALESCE(f.n, 0)
            ), picked AS (
              SELECT d.tenant_id, d.endpoint_id, d.event_id FROM webhook_deliveries d
                JOIN (SELECT * FROM due ORDER BY rn_t, next_attempt_at, tenant_id, endpoint_id, event_id LIMIT $2) p
                  ON p.tenant_id = d.tenant_id AND p.endpoint_id = d.endpoint_id AND p.event_id = d.event_id
               WHERE d.status = 'pending' AND d.next_attempt_at <= $1
                 FOR UPDATE OF d SKIP LOCKED
            ), leased AS (
              UPDATE webhook_deliveries d SET next_attempt_at = $1 + make_interval(secs => $3), lease_owner = $4, lease_expires_at = $1 + make_interval(secs => $3)
                FROM picked p WHERE d.tenant_id = p.tenant_id AND d.endpoint_id = p.endpoint_id AND d.event_id = p.event_id
              RETURNING d.*
            )
            SELECT l.tenant_id, l.endpoint_id, l.event_id, l.event_type, l.attempts, l.created_at, e.url,
                   ev.id AS ev_id, ev.type AS ev_type, ev.target_id AS ev_target_id, ev.channel_id AS ev_channel_id,
                   ev.data::text AS ev_data, ev.created_at AS ev_created_at
              FROM leased l
              JOIN webhook_endpoints e ON e.tenant_id = l.tenant_id AND e.id = l.endpoint_id
              JOIN events ev ON ev.tenant_id = l.tenant_id AND ev.id = l.event_id
            """,
            [
                now, limit, leaseSeconds, owner, PostgresTextArray(endpoints.map(\.key)), PostgresTextArray(endpoints.map { String($0.value) }),
                PostgresTextArray(tenants.map(\.key)), PostgresTextArray(tenants.map { String($0.value) }),
                shares.perEndpoint, shares.perTenant
            ]
        ).map(WebhookJob.init(row:))
    }

    /// Records one attempt of `job` (system scope, one transaction): the log row, then the
    /// delivery's new state — delivered; due again after the retry delay; or given up (at
    /// least 10 attempts and 72 h) — and the endpoint's failure streak. An endpoint failing
    /// for 72 h is disabled (`disabled_reason: "failing"`) with an audit event (actor
    /// `system`). `random` is uniform in 0..<1 (the jitter).
    public static func complete(
        _ c: PostgresConnection, job: WebhookJob, owner: String, outcome: WebhookAttemptOutcome,
        now: Date, random: Double
    ) throws -> WebhookCompletion {
        let attempt = job.attempts + 1
        try c.execute(
            """
            INSERT INTO webhook_attempts (tenant_id, endpoint_id, event_id, event_type, attempt, status_code, error, duration_ms, delivered_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            """,
            [
                job.tenantId, job.endpointId, job.eventId, job.eventType, attempt, outcome.statusCode, outcome.error,
                outcome.durationMs, now
            ])
        let completion: WebhookCompletion
        if outcome.delivered {
            completion = .delivered
        } else if let delay = WebhookRules.retryDelay(attempts: attempt, ageSeconds: now.timeIntervalSince(job.createdAt), random: random) {
            completion = .retry(at: now.addingTimeInterval(delay))
        } else {
            completion = .gaveUp
        }
        let status: String, next: Date
        switch completion {
        case .delivered: status = "delivered"; next = now
        case .retry(let at): status = "pending"; next = at
        default: status = "failed"; next = now
        }
        let updated = try c.execute(
            """
            UPDATE webhook_deliveries SET status = $5, attempts = $6, next_attempt_at = $7, lease_owner = NULL, lease_expires_at = NULL,
                   finished_at = CASE WHEN $5 = 'pending' THEN NULL ELSE $8::timestamptz END
             WHERE tenant_id = $1 AND endpoint_id = $2 AND event_id = $3 AND lease_owner = $4 AND status = 'pending'
            """, [job.tenantId, job.endpointId, job.eventId, owner, status, attempt, next, now])
        guard updated > 0 else { return .leaseLost }
        if outcome.delivered {
            try c.execute(
                "UPDATE webhook_endpoints SET failing_since = NULL WHERE tenant_id = $1 AND id = $2 AND failing_since IS NOT NULL",
                [job.tenantId, job.endpointId])
            return completion
        }
        guard
            let row = try c.query(
                """
                UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $3) WHERE tenant_id = $1 AND id = $2
                RETURNING failing_since, status
                """, [job.tenantId, job.endpointId, now]
            ).first
        else { return completion }
        if try row.string("status") == "enabled", WebhookRules.shouldDisable(failingSince: try row.optionalDate("failing_since"), now: now) {
            try c.execute(
                """
                UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = 'failing', updated_at = $3 WHERE tenant_id = $1 AND id = $2
                """, [job.tenantId, job.endpointId, now])
            try AuditStore.record(
                c, tenantId: job.tenantId, actorId: "system", action: "webhook_endpoint.disable",
                objectType: "webhook_endpoint", objectId: job.endpointId, requestId: "webhook-worker",
                details: [
                    "disabled_reason": "failing",
                    "failing_since": .string(Timestamp.format(try row.date("failing_since")))
                ])
        }
        return completion
    }

    /// Pending deliveries (system scope): the backlog, for metrics and benchmarks.
    public static func pendingCount(_ c: PostgresConnection) throws -> Int64 {
        try c.query("SELECT count(*)::bigint AS n FROM webhook_deliveries WHERE status = 'pending'")[0].int64("n")
    }
}

/// What a webhook claim may add (`WebhookStore.claim`): the per-endpoint and per-tenant caps of
/// attempts in flight and what the claiming worker already has in flight, by endpoint id and
/// by tenant id.
public struct WebhookClaimShares: Sendable {
    public var perEndpoint: Int
    public var perTenant: Int
    public var inFlightByEndpoint: [String: Int]
    public var inFlightByTenant: [String: Int]
    public init(perEndpoint: Int, perTenant: Int, inFlightByEndpoint: [String: Int] = [:], inFlightByTenant: [String: Int] = [:]) {
        self.perEndpoint = perEndpoint
        self.perTenant = perTenant
        self.inFlightByEndpoint = inFlightByEndpoint
        self.inFlightByTenant = inFlightByTenant
    }
}
