import Foundation
import Crypto
import HTTPServer
import JSON
import LiveRelayCore
import LiveRelayStore
import Postgres

/// The pieces of a pipelined write transaction that start, update and end share
/// (docs/write-path.md "Round trips", "Idempotency", "Quota"): the idempotency key, the quota
/// reading and check, round trip 2's settings and round trip 3's stored answer.
extension LifecycleHandlers {
    // MARK: the pipelined transaction (docs/write-path.md "Round trips")

    /// What a write knows about its idempotency key before its transaction.
    struct Idempotency {
        let endpoint: String
        let key: String
        let hash: String

        init(_ req: HTTPRequest, key: String, body: JSONValue) {
            endpoint = req.idempotencyEndpoint
            self.key = key
            hash = Digest.sha256Hex(body.serialized())
        }

        func claim(_ tenant: String) -> PostgresStatement {
            IdempotencyStore.claimStatement(
                tenantId: tenant, endpoint: endpoint, key: key, requestHash: hash,
                retentionSeconds: LifecycleHandlers.writeKeyRetentionSeconds)
        }

        /// The statements storing `body` (status `status`) as the key's response: the
        /// completion of a claim made in round trip 1 (`WritePath.complete`, a start) when
        /// `replacingExpired` is nil, else the record inserted with the response
        /// (`IdempotencyStore.storeStatements`, an update or an end, after `looked`), whose
        /// failure `IdempotencyStore.storeFailure` judges.
        func store(_ tenant: String, status: Int, body: [UInt8], replacingExpired: Bool?) -> [PostgresStatement] {
            let response = StoredResponse(status: status, body: body)
            guard let replacingExpired else { return [WritePath.complete(tenantId: tenant, endpoint: endpoint, key: key, response: response)] }
            return IdempotencyStore.storeStatements(
                tenantId: tenant, endpoint: endpoint, key: key, requestHash: hash, response: response,
                retentionSeconds: LifecycleHandlers.writeKeyRetentionSeconds, replacingExpired: replacingExpired)
        }

        /// The key's scope for round trip 1's read of it (`WritePath.lockTarget`).
        var scope: (endpoint: String, key: String) { (endpoint, key) }

        /// The key's record read on its own (`IdempotencyStore.lookupLateral`'s columns; no row
        /// without a record), with `lookupParams`.
        var lookupSQL: String { "SELECT * FROM (\(IdempotencyStore.lookupLateral(tenant: "$1", endpoint: "$2", key: "$3"))) idem" }

        /// The parameters of `lookupSQL` for `tenant`.
        func lookupParams(_ tenant: String) -> [(any PostgresBindable)?] { [tenant, endpoint, key] }

        /// Rule 3 from the key's columns of the locked target's row (`WritePath.lockTarget`).
        /// - Throws: 422 `IDEMPOTENCY_KEY_REUSED`; `.decoding` on a malformed row.
        func looked(_ row: PostgresRow) throws -> IdempotencyStore.Lookup {
            try IdempotencyStore.looked(row, requestHash: hash)
        }

        /// The replay answer of a stored response.
        static func replayed(_ stored: StoredResponse) -> HTTPResponse {
            HTTPResponse(
                status: stored.status, headers: [("Content-Type", "application/json"), ("Idempotent-Replayed", "true")], body: stored.body)
        }

        /// Rule 3 from the claim's result: nil (do the work) or the replay response.
        func replay(_ outcome: PostgresPipelineOutcome, at index: Int) throws -> HTTPResponse? {
            let rows: [PostgresRow]
            do {
                rows = try result(outcome, index).rows
            } catch let e as PostgresError where e.sqlState == "55P03" && outcome.failure?.index == index {
                throw IdempotencyStore.inUse
            }
            guard let stored = try IdempotencyStore.claimed(rows, requestHash: hash) else { return nil }
            return Self.replayed(stored)
        }
    }

    /// The result of statement `index` of a pipeline, or the error that stopped the pipeline
    /// at or before it.
    static func result(_ outcome: PostgresPipelineOutcome, _ index: Int) throws -> PostgresResult {
        if index < outcome.results.count { return outcome.results[index] }
        throw outcome.failure?.error ?? PostgresError(kind: .decoding, message: "pipeline result \(index) missing")
    }

    /// Where a write's quota reading comes from (docs/write-path.md "The quota read only near
    /// the limit"): the counters read in round trip 1 (`index`: that read's place in the
    /// pipeline), or, when this process read the day's counters less than a second ago and
    /// found it far from its limit, that reading (`QuotaHints`). The hint only sends the write
    /// down the fast path, whose re-read after reserving keeps the limit.
    struct QuotaRead {
        let tenant: String
        let day: String
        let hint: QuotaHints.Reading?
        let index: Int?
        /// When the read was planned, just before round trip 1 went out (uptime nanoseconds):
        /// the reading is at least this old, so its age runs from there (`QuotaHints.record`).
        let readAt = DispatchTime.now().uptimeNanoseconds

        /// Takes a hint for `tenant`'s `day`; without one, appends the read to `reads`.
        static func plan(tenant: String, day: String, into reads: inout [PostgresStatement]) -> QuotaRead {
            if let hint = QuotaHints.shared.far(tenantId: tenant, day: day) {
                return QuotaRead(tenant: tenant, day: day, hint: hint, index: nil)
            }
            reads.append(WritePath.readQuota(tenantId: tenant, day: day))
            return QuotaRead(tenant: tenant, day: day, hint: nil, index: reads.count - 1)
        }

        /// The reading: the hint, or the read's result in `r1`, recorded as this process's latest.
        /// - Throws: the pipeline's failure when the read did not run; `.decoding` on a bad row.
        func reading(_ r1: PostgresPipelineOutcome) throws -> QuotaHints.Reading {
            if let hint { return hint }
            let q = try WritePath.quota(result(r1, index ?? -1))
            QuotaHints.shared.record(tenantId: tenant, day: day, q, takenAt: readAt)
            return q
        }
    }

    /// Rule 8 quota (state-bearing writes) from the day's counters read in round trip 1, or from
    /// a recent reading far from the limit that stands in for that read (`QuotaRead`):
    /// `429 QUOTA_EXCEEDED` when used up. Far from the limit the reservation is checked again
    /// after it is made (`needsRecheck`, in round trip 2); near it, or when that re-check
    /// failed once, the counters are locked and read exactly (`QuotaStore.lockAll`, one more
    /// round trip) so the quota is never overshot.
    /// `reserves`: the units of `day` the write adds net (an update replacing a queued update of
    /// the same day adds none: `WriteRules.reservationChanges`); `quota.exhausted` is recorded
    /// only when those take the day's last unit.
    /// - Returns: whether round trip 2 must re-read the counters.
    static func checkQuota(
        _ c: PostgresConnection, tenant: String, day: String, read q: (limit: Int64, reserved: Int64, used: Int64),
        exact: Bool, now: Date, reserves: Int64 = 1
    ) throws -> Bool {
        try WriteRules.checkQuota(limit: q.limit, reserved: q.reserved, used: q.used, now: now)
        if !exact && QuotaStore.worthFastPath(limit: q.limit, reserved: q.reserved, used: q.used) { return true }
        let e = try QuotaStore.lockAll(c, tenantId: tenant, day: day)
        QuotaHints.shared.record(tenantId: tenant, day: day, e)
        try WriteRules.checkQuota(limit: e.limit, reserved: e.reserved, used: e.used, now: now)
        // Only the exact path can take the day's last unit: `quota.exhausted` is recorded (in
        // this transaction, once per day) when this write's reservation uses it up.
        if reserves > 0 {
            try EventStore.quotaReserved(
                c, tenantId: tenant, day: day, limit: e.limit, used: e.used, reserved: e.reserved + reserves,
                resetsAt: WriteRules.quotaResetsAt(now))
        }
        return false
    }

    /// The round trip 2 re-check of the fast quota path (see `checkQuota`): when other
    /// sessions' uncommitted reservations could push the day past its limit, the transaction
    /// is run again (SQLSTATE 40001 → `PostgresPool.transaction` retries) on the exact path.
    /// The reading is recorded as this process's latest for `tenant`'s `day` (`QuotaHints`).
    static func recheckQuota(_ r: PostgresResult, tenant: String, day: String, exactNext: inout Bool) throws {
        let q = try WritePath.quota(r)
        QuotaHints.shared.record(tenantId: tenant, day: day, q)
        if !QuotaStore.fastPathAllows(limit: q.limit, reserved: q.reserved, used: q.used) {
            exactNext = true
            throw PostgresError.retryable("quota near its limit: checking exactly")
        }
    }

    /// The settings statement that opens round trip 2 of a write: the `writer` settings naming
    /// its operation (`WritePath.writerSettings`) unless the BEGIN already carried them (`sent`,
    /// `PostgresConnection.addPendingSettings`), then a claim at commit's settings
    /// (`CommitClaim.settings`), then `statement` (the one-statement flag of the writes
    /// statement that follows, `WritePath.writerRowsSetting`); no statement when nothing is
    /// left.
    static func settingsStatements(
        writer: [(String, String)], sent: Bool, claim: [(String, String)], statement: (String, String)? = nil
    ) -> [PostgresStatement] {
        let settings = (sent ? [] : writer) + claim + (statement.map { [$0] } ?? [])
        return settings.isEmpty ? [] : [.localSettings(settings)]
    }

    /// Round trip 3: stores the response under the idempotency key and commits, in one pipeline.
    /// `before`: statements that join this round trip ahead of the stored response (a claim
    /// at commit's priority decision). `replacingExpired`: as `Idempotency.store` (nil for a
    /// start, whose claim round trip 1 made).
    /// - Throws: as `IdempotencyStore.storeFailure`, then any pipeline error.
    static func finish(
        _ c: PostgresConnection, tenant: String, _ idem: Idempotency, status: Int, _ value: JSONValue, before: [PostgresStatement] = [],
        replacingExpired: Bool?
    ) throws -> HTTPResponse {
        let bytes = value.serialized()
        let statements = before + idem.store(tenant, status: status, body: bytes, replacingExpired: replacingExpired)
        let outcome = try c.pipeline(statements, commit: true)
        try IdempotencyStore.storeFailure(outcome, at: statements.count - 1)
        _ = try outcome.get()
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: bytes)
    }
}
