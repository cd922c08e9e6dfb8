import Foundation
import JSON
import LiveRelayCore
import Postgres

/// A claimed broadcast: the channel operation plus its channel's APNs facts.
public struct ClaimedBroadcast: Sendable, Equatable {
    public let op: ChannelOperationRecord
    public let appId: String
    public let environment: String
    public let apnsChannelId: String
    /// `none` or `most_recent` (`apns-expiration` 0 for `none`).
    public let storagePolicy: String
    /// The APNs `timestamp` (epoch s) of this broadcast: strictly increasing per channel, kept for resends.
    public let timestamp: Int64
    /// Attempts including this one.
    public let attempts: Int
}

/// The broadcaster's SQL (docs/channels.md "APNs wire"): one broadcast per channel write, in
/// commit order per channel, at most one in flight per channel; and the channel finaliser
/// (an ended channel's APNs channel is deleted once every member was ended). Runs in the system
/// scope; every statement names `tenant_id`.
public enum BroadcastStore {
    /// Claims up to `limit` due broadcasts, each the head of its channel (no earlier broadcast
    /// queued or sending), `FOR UPDATE SKIP LOCKED`: marks them `sending` under `worker`'s lease
    /// and assigns the timestamp (max(now, channel's last + 1), kept on resends).
    ///
    /// Fair across tenants (migration 0029): the tenants with queued broadcasts are walked one
    /// index probe each, each contributes its earliest `limit + 8` due heads, and the claim
    /// takes `limit` of them round robin (every tenant's first before any tenant's second; ties
    /// broken by a hash of the tenant id and `rotation`), locking as it goes (`SKIP LOCKED`
    /// before the limit, so heads concurrent broadcasters hold are passed over, not lost), so
    /// one tenant's backlog delays another tenant's broadcast by at most one claim per broadcaster.
    public static func claim(
        _ c: PostgresConnection, worker: String, limit: Int, leaseSeconds: Double, now: Date, rotation: Int = 0
    ) throws -> [ClaimedBroadcast] {
        let nowS = Timestamp.epochSeconds(now)
        let rows = try c.query(
            """
            WITH RECURSIVE queued_tenants AS (
                (SELECT o.tenant_id FROM channel_operations o WHERE o.broadcast_status = 'queued' ORDER BY o.tenant_id LIMIT 1)
              UNION ALL
                SELECT (SELECT o.tenant_id FROM channel_operations o WHERE o.broadcast_status = 'queued' AND o.tenant_id > w.tenant_id
                         ORDER BY o.tenant_id LIMIT 1)
                  FROM queued_tenants w WHERE w.tenant_id IS NOT NULL
            ), cand AS (
              SELECT x.tenant_id, x.id, row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.broadcast_next_at, x.id) AS rn,
                     x.broadcast_next_at
                FROM queued_tenants w CROSS JOIN LATERAL (
                     SELECT o.tenant_id, o.id, o.broadcast_next_at FROM channel_operations o
                      WHERE o.tenant_id = w.tenant_id AND o.broadcast_status = 'queued' AND o.broadcast_next_at <= now()
                        AND NOT EXISTS (SELECT 1 FROM channel_operations p WHERE p.tenant_id = o.tenant_id AND p.channel_id = o.channel_id
                                          AND p.broadcast_status IN ('queued', 'sending') AND (p.seq < o.seq OR p.broadcast_status = 'sending'))
                      ORDER BY o.broadcast_next_at LIMIT $6) x
               WHERE w.tenant_id IS NOT NULL
            ), picked AS (  -- the limit after the lock: a head another broadcaster holds is passed over, not lost
              SELECT o.tenant_id, o.id, o.channel_id FROM channel_operations o
                JOIN cand k ON o.tenant_id = k.tenant_id AND o.id = k.id
               WHERE o.broadcast_status = 'queued'
               ORDER BY k.rn, hashtext(k.tenant_id || $5), k.broadcast_next_at, k.id LIMIT $2
                 FOR UPDATE OF o SKIP LOCKED
            ), chans AS (
              -- SKIP LOCKED: a channel write holds its channel while it locks queued broadcasts; never wait for it here.
              SELECT ch.tenant_id, ch.id, ch.last_timestamp FROM channels ch JOIN picked p ON p.tenant_id = ch.tenant_id AND ch.id = p.channel_id
               FOR UPDATE OF ch SKIP LOCKED
            ), claimed AS (
              UPDATE channel_operations o SET broadcast_status = 'sending', broadcast_attempts = o.broadcast_attempts + 1,
                     broadcast_lease_owner = $1, broadcast_lease_expires_at = now() + make_interval(secs => $3),
                     broadcast_timestamp = COALESCE(o.broadcast_timestamp, GREATEST($4::bigint, ch.last_timestamp + 1)), updated_at = now()
                FROM picked p JOIN chans ch ON ch.tenant_id = p.tenant_id AND ch.id = p.channel_id
               WHERE o.tenant_id = p.tenant_id AND o.id = p.id
              RETURNING o.*
            ), stamped AS (
              UPDATE channels ch SET last_timestamp = GREATEST(ch.last_timestamp, c.broadcast_timestamp)
                FROM claimed c WHERE ch.tenant_id = c.tenant_id AND ch.id = c.channel_id RETURNING ch.id
            )
            SELECT c.tenant_id, c.id, c.channel_id, c.seq, c.kind, c.revision, c.has_state, c.state::text AS state, c.alert::text AS alert,
                   c.stale_at, c.relevance_score, c.priority, c.expires_at, c.dismiss_at, c.superseded_by, c.broadcast_status,
                   c.broadcast_attempts, c.broadcast_timestamp, c.apns_request_id, c.apns_unique_id, c.broadcast_failure::text AS broadcast_failure,
                   c.fanout_state, c.fanout_cursor, c.consumes_quota, c.quota_day::text AS quota_day, c.created_at, c.updated_at,
                   ch.app_id, ch.environment, ch.apns_channel_id, ch.storage_policy, (SELECT count(*) FROM stamped) AS n_stamped
              FROM claimed c JOIN channels ch ON ch.tenant_id = c.tenant_id AND ch.id = c.channel_id
            """, [worker, limit, leaseSeconds, nowS, String(rotation), limit + 8])
        return try rows.map { r in
            let op = try ChannelOperationRecord(row: r)
            return ClaimedBroadcast(
                op: op, appId: try r.string("app_id"), environment: try r.string("environment"),
                apnsChannelId: try r.string("apns_channel_id"), storagePolicy: try r.string("storage_policy"),
                timestamp: op.broadcastTimestamp ?? Timestamp.epochSeconds(now), attempts: op.broadcastAttempts)
        }
    }

    /// Writes a broadcast's outcome if `worker` still holds it on attempt `attempts` (fenced):
    /// accepted → ids stored and one quota unit used; channel invalid → failed and the channel
    /// `ended` (reason `channel_invalid`); failed → failure stored; retry → queued again after
    /// `delay` seconds. Returns whether it applied.
    @discardableResult
    public static func apply(_ c: PostgresConnection, _ b: ClaimedBroadcast, _ d: BroadcastDecision, worker: String) throws -> Bool {
        let status: String, failure: JSONValue?, delay: Double
        var reqId: String?, uniqueId: String?
        switch d {
        case .accepted(let r, let u): status = "accepted"; failure = nil; delay = 0; reqId = r; uniqueId = u
        case .channelInvalid(let f): status = "failed"; failure = f; delay = 0
        case .failed(let f): status = "failed"; failure = f; delay = 0
        case .retry(let s): status = "queued"; failure = nil; delay = s
        }
        // The fence: this worker still holds the broadcast on this attempt.
        let fence = "tenant_id = $1 AND id = $2 AND broadcast_status = 'sending' AND broadcast_lease_owner = $3 AND broadcast_attempts = $4"
        if case .channelInvalid = d {
            // Lock order: this channel operation, the members, the channel, then the quota
            // counters. Its status change releases its quota unit (a counter row, migration
            // 0037), so it comes after the channel: a channel write holds the channel while it
            // takes counters (docs/channels.md "Quota").
            guard try !c.query("SELECT 1 FROM channel_operations WHERE \(fence) FOR UPDATE", [b.op.tenantId, b.op.id, worker, b.attempts]).isEmpty
            else { return false }
            try endInvalidChannel(c, tenantId: b.op.tenantId, channelId: b.op.channelId)
        }
        let n = try c.execute(
            """
            UPDATE channel_operations SET broadcast_status = $5, broadcast_failure = COALESCE($6::jsonb, broadcast_failure),
                   apns_request_id = COALESCE($7, apns_request_id), apns_unique_id = COALESCE($8, apns_unique_id),
                   broadcast_next_at = CASE WHEN $5 = 'queued' THEN now() + make_interval(secs => $9) ELSE broadcast_next_at END,
                   broadcast_lease_owner = NULL, broadcast_lease_expires_at = NULL, updated_at = now()
             WHERE \(fence)
            """, [b.op.tenantId, b.op.id, worker, b.attempts, status, failure?.jsonString, reqId, uniqueId, delay])
        guard n > 0 else { return false }
        if case .channelInvalid = d {
            try queueFanoutEndOfInvalidChannel(c, tenantId: b.op.tenantId, channelId: b.op.channelId)
        }
        if case .accepted = d, b.op.consumesQuota, let day = b.op.quotaDay {
            // The broadcast consumes one unit of the day (docs/channels.md "Quota").
            try c.execute(
                """
                INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used) VALUES ($1, $2::date, lr_quota_shard(), 0, 1)
                ON CONFLICT (tenant_id, day, shard) DO UPDATE SET used = q.used + 1
                """, [b.op.tenantId, day])
        }
        return true
    }

    /// Ends a channel APNs no longer knows, in the transaction of the broadcast that learned it:
    /// its broadcast members end, the channel is `ended` (`channel_invalid`) and its queued
    /// broadcasts are cancelled (which releases their quota units). Members first, then the
    /// channel: the order of the lifetime sweep and `finish` (a target update's member-count
    /// trigger locks the channel).
    static func endInvalidChannel(_ c: PostgresConnection, tenantId: String, channelId: String) throws {
        try endBroadcastMembersOfInvalidChannel(c, tenantId: tenantId, channelId: channelId)
        try c.execute(
            """
            UPDATE channels SET status = 'ended', end_reason = 'channel_invalid', ended_at = COALESCE(ended_at, now()), updated_at = now()
             WHERE tenant_id = $1 AND id = $2 AND status <> 'ended'
            """, [tenantId, channelId])
        try c.execute(
            """
            UPDATE channel_operations SET broadcast_status = 'cancelled', updated_at = now()
             WHERE tenant_id = $1 AND channel_id = $2 AND broadcast_status = 'queued'
            """, [tenantId, channelId])
    }

    /// The members of a channel APNs no longer knows (docs/channels.md "APNs wire"), in the
    /// transaction that ends it: broadcast members cannot be reached any more, so they end now
    /// (`end_reason` `token_invalid`: their "token" is the channel); fan-out members still have
    /// their own tokens, so a stateless end channel operation (no broadcast, `cancelled`) is
    /// queued for the fan-out walk, which sends each of them an end like a channel end does.
    /// Without it they stayed live until the lifetime sweep, and every write that could end
    /// them was refused (`TARGET_ON_CHANNEL`, `CHANNEL_ENDED`).
    static func endBroadcastMembersOfInvalidChannel(_ c: PostgresConnection, tenantId: String, channelId: String) throws {
        try c.execute(
            """
            UPDATE targets SET status = 'ended', end_reason = 'token_invalid', ended_at = COALESCE(ended_at, now()), updated_at = now()
             WHERE tenant_id = $1 AND channel_id = $2 AND delivery = 'broadcast' AND status NOT IN ('ended', 'creation_failed')
            """, [tenantId, channelId])
    }

    /// The fan-out half of the above (see `endBroadcastMembersOfInvalidChannel`): the stateless
    /// end channel operation for the fan-out walk, when the channel has live fan-out members.
    static func queueFanoutEndOfInvalidChannel(_ c: PostgresConnection, tenantId: String, channelId: String) throws {
        let id = Identifier.make(.channelOperation)
        let queued = try c.execute(
            """
            WITH ch AS (
              UPDATE channels SET op_seq = op_seq + 1, updated_at = now()
               WHERE tenant_id = $1 AND id = $2
                 AND EXISTS (SELECT 1 FROM targets t WHERE t.tenant_id = $1 AND t.channel_id = $2 AND t.delivery = 'fanout'
                                AND t.status NOT IN ('ended', 'creation_failed'))
              RETURNING op_seq, revision
            )
            INSERT INTO channel_operations (tenant_id, id, channel_id, seq, kind, revision, has_state, broadcast_status, consumes_quota)
            SELECT $1, $3, $2, ch.op_seq, 'end', ch.revision, false, 'cancelled', false FROM ch
            """, [tenantId, channelId, id])
        if queued > 0 { try c.notify(ChannelStore.channelsChannel, payload: tenantId + ":" + id) }
    }

    /// Broadcasts whose lease expired (their worker died): back to `queued`, or — for an alert,
    /// which may have reached APNs — `failed` with `OUTCOME_UNKNOWN`. Returns how many.
    @discardableResult
    public static func rescue(_ c: PostgresConnection) throws -> Int {
        try c.execute(
            """
            UPDATE channel_operations SET broadcast_status = CASE WHEN alert IS NULL THEN 'queued' ELSE 'failed' END,
                   broadcast_failure = CASE WHEN alert IS NULL THEN broadcast_failure
                                            ELSE '{"code":"OUTCOME_UNKNOWN","message":"the worker sending this broadcast stopped"}'::jsonb END,
                   broadcast_lease_owner = NULL, broadcast_lease_expires_at = NULL, broadcast_next_at = now(), updated_at = now()
             WHERE broadcast_status = 'sending' AND broadcast_lease_expires_at < now()
            """)
    }

    /// A channel whose end has been fully expanded and broadcast: ready for its APNs channel's deletion.
    public struct Ending: Sendable, Equatable {
        public let tenantId: String, id: String, appId: String, environment: String, apnsChannelId: String
    }

    /// Channels `ending` whose end operation's broadcast is final and whose fan-out walk is
    /// done; locks nothing (the finaliser calls `finish` per channel).
    public static func readyToFinish(_ c: PostgresConnection, limit: Int) throws -> [Ending] {
        try c.query(
            """
            SELECT ch.tenant_id, ch.id, ch.app_id, ch.environment, ch.apns_channel_id FROM channels ch
             WHERE ch.status = 'ending' AND ch.updated_at <= now()
               AND NOT EXISTS (SELECT 1 FROM channel_operations o WHERE o.tenant_id = ch.tenant_id AND o.channel_id = ch.id
                                 AND (o.fanout_state = 'pending' OR o.broadcast_status IN ('queued', 'sending')))
             ORDER BY ch.updated_at LIMIT $1
            """, [limit]
        ).map { r in
            Ending(
                tenantId: try r.string("tenant_id"), id: try r.string("id"), appId: try r.string("app_id"),
                environment: try r.string("environment"), apnsChannelId: try r.string("apns_channel_id"))
        }
    }

    /// Ends the channel after its APNs channel was deleted (or deletion is hopeless): its
    /// broadcast members end (reason `sender`: the channel's end reached them by the
    /// broadcast), the channel becomes `ended` (a `channel.ended` event is written by trigger).
    public static func finish(_ c: PostgresConnection, _ e: Ending) throws {
        try c.execute(
            """
            UPDATE targets SET status = 'ended', end_reason = 'sender', ended_at = COALESCE(ended_at, now()), updated_at = now()
             WHERE tenant_id = $1 AND channel_id = $2 AND delivery = 'broadcast' AND status NOT IN ('ended', 'creation_failed')
            """, [e.tenantId, e.id])
        try c.execute(
            """
            UPDATE channels SET status = 'ended', end_reason = COALESCE(end_reason, 'sender'), ended_at = COALESCE(ended_at, now()),
                   apns_deleted_at = now(), updated_at = now()
             WHERE tenant_id = $1 AND id = $2 AND status = 'ending'
            """, [e.tenantId, e.id])
    }

    /// Puts a channel whose APNs deletion failed transiently back for a later pass (`after` seconds).
    public static func postpone(_ c: PostgresConnection, _ e: Ending, after: Double) throws {
        try c.execute(
            "UPDATE channels SET updated_at = now() + make_interval(secs => $3) WHERE tenant_id = $1 AND id = $2 AND status = 'ending'",
            [e.tenantId, e.id, after])
    }
}
