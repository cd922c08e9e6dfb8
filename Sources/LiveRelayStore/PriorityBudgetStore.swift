import Foundation
import LiveRelayCore
import Postgres

/// SQL pieces of the priority-10 budget (docs/priority-budget.md; migrations 0014 and 0018).
///
/// The deployment's default budgets reach SQL as two transaction-local settings that
/// `Database` sets in every transaction (`settings(_:)`), so objects built in SQL (event
/// payloads) and in Swift agree; without them the SQL falls back to 40 and 240.
public enum PriorityBudgetSQL {
    /// Setting carrying `PriorityBudget.Defaults.priority10HourlyBudget` into SQL.
    public static let priority10Setting = "liverelay.priority10_hourly_budget"
    /// Setting carrying `PriorityBudget.Defaults.frequentUpdatesHourlyBudget` into SQL.
    public static let frequentUpdatesSetting = "liverelay.frequent_updates_hourly_budget"

    /// The `Database` settings for `defaults`.
    public static func settings(_ defaults: PriorityBudget.Defaults) -> [(String, String)] {
        [(priority10Setting, String(defaults.priority10HourlyBudget)), (frequentUpdatesSetting, String(defaults.frequentUpdatesHourlyBudget))]
    }

    /// An SQL expression: the budget (int, priority-10 sends per hour) of a target whose
    /// installation row is `i` — NULL for Android; the tenant's `frequent_updates_hourly_budget`
    /// (or the default) when the installation reports `frequent_updates`, else its
    /// `priority10_hourly_budget` (or the default). Same rule as migration 0018's `lr_priority10_budget` and `PriorityBudget.budget`.
    /// `tenant`: the alias of the installation's tenant row when the statement joins it (one
    /// probe, `WritePath.lockTarget`); without it, the expression reads the tenant's budgets
    /// with a subquery each. `IS DISTINCT FROM`: a left-joined installation that is missing
    /// (all NULL) gives NULL, as a subquery over no row did (`platform` is never NULL).
    static func budget(installation i: String, tenant n: String? = nil) -> String {
        let d = PriorityBudget.Defaults.standard
        func tenants(_ column: String) -> String {
            n.map { "\($0).\(column)" } ?? "(SELECT n.\(column) FROM tenants n WHERE n.tenant_id = \(i).tenant_id)"
        }
        return """
            CASE WHEN \(i).platform IS DISTINCT FROM 'ios' THEN NULL
                 WHEN \(i).frequent_updates THEN COALESCE(\(tenants("frequent_updates_hourly_budget")),
                      NULLIF(current_setting('\(frequentUpdatesSetting)', true), '')::int, \(d.frequentUpdatesHourlyBudget))
                 ELSE COALESCE(\(tenants("priority10_hourly_budget")),
                      NULLIF(current_setting('\(priority10Setting)', true), '')::int, \(d.priority10HourlyBudget)) END
            """
    }

    /// The `priority10_sends` column of a target row `targets` (for `TargetStore.columns`): its
    /// window, the epoch milliseconds of its counted priority-10 sends, oldest first, kept in
    /// `target_clocks` (migration 0026; empty before its first claim; docs/priority-budget.md).
    static let targetWindowColumn = windowColumn(
        of: "(SELECT k.priority10_sends FROM target_clocks k WHERE k.tenant_id = targets.tenant_id AND k.target_id = targets.id)")

    /// The `priority10_sends` column (epoch milliseconds, oldest first) from `sends`, an
    /// expression of the target's clock row that is NULL without one (`k.priority10_sends` of a
    /// left-joined `target_clocks k`, or a subquery): the empty window then, as before a
    /// target's first claim.
    static func windowColumn(of sends: String) -> String { "COALESCE(\(sends), '{}') AS priority10_sends" }

    /// The `priority10_budget` column of a target row `targets` (for `TargetStore.columns`).
    static let targetBudgetColumn = """
        (SELECT \(budget(installation: "i")) FROM installations i
          WHERE i.tenant_id = targets.tenant_id AND i.id = targets.installation_id) AS priority10_budget
        """
}

extension DispatchStore {
    /// Takes the priority-budget decision of each claimed operation (`PriorityBudget.decide`
    /// with the target's window as claimed, at `now` — the dispatcher's clock) and stores, in
    /// the claim's transaction, the priority each will be sent at where it differs from what
    /// the row shows (`sent_priority`, NULL when as requested): one UPDATE, only when some
    /// decision changed. Returns the operations carrying their decision (`budgetDecision`).
    public static func decidePriorities(_ c: PostgresConnection, _ ops: [DispatchOperation], now: Date) throws -> [DispatchOperation] {
        let (out, update) = priorityDecisions(ops, now: now)
        if let update { try c.execute(update.sql, update.params) }
        return out
    }

    /// The pure half of `decidePriorities`: the operations carrying their decision, and the
    /// UPDATE of `sent_priority` to run in the claim's transaction (nil when no decision
    /// differs from the row), for callers that pipeline it (a claim at commit,
    /// docs/delivery.md "Claims at commit").
    public static func priorityDecisions(_ ops: [DispatchOperation], now: Date) -> ([DispatchOperation], PostgresStatement?) {
        guard !ops.isEmpty else { return (ops, nil) }
        let nowMs = PriorityBudget.epochMilliseconds(now)
        var out = ops
        var changed: [(tenant: String, id: String, sent: String)] = []
        for i in out.indices {
            let op = out[i]
            let d = PriorityBudget.decide(
                sendsInWindow: PriorityBudget.sendsInWindow(op.priority10Sends, nowMs: nowMs),
                budget: op.priority10Budget ?? 0, kind: op.kind, hasAlert: op.alert != nil,
                platform: op.platform, requestedPriority: op.priority)
            out[i].budgetDecision = d
            out[i].budgetDecidedAtMs = nowMs
            let stored = d.priority == op.priority ? nil : d.priority
            if stored != op.sentPriority { changed.append((op.tenantId, op.id, stored.map(String.init) ?? "")) }
        }
        guard !changed.isEmpty else { return (out, nil) }
        return (
            out,
            PostgresStatement(
                """
                UPDATE operations o SET sent_priority = NULLIF(x.sent, '')::smallint
                  FROM unnest($1::text[], $2::text[], $3::text[]) AS x(tenant_id, id, sent)
                 WHERE o.tenant_id = x.tenant_id AND o.id = x.id
                """, [PostgresTextArray(changed.map(\.tenant)), PostgresTextArray(changed.map(\.id)), PostgresTextArray(changed.map(\.sent))])
        )
    }

    /// Adds the counted sends among `applied` (decision `counts`, now `accepted` or `unknown`:
    /// APNs has or may have it) to their targets' windows in one upsert of `target_clocks`
    /// (migration 0026: a narrow row, so a HOT update, not a rewrite of the wide target row):
    /// entries older than 60 minutes before the send dropped, the newest
    /// `PriorityBudget.maxBudget` kept. Called by
    /// `applyResults` after the operation rows and before the target effects (so an event
    /// such as `target.ended` shows the count including this send).
    static func recordPriority10Sends(_ c: PostgresConnection, _ applied: [Result]) throws {
        let counted = applied.filter { r in
            guard let d = r.op.budgetDecision, d.counts, r.op.budgetDecidedAtMs != nil else { return false }
            let s = r.decision.operation.status
            return s == .accepted || s == .unknown
        }
        guard !counted.isEmpty else { return }
        try c.execute(
            """
            INSERT INTO target_clocks AS w (tenant_id, target_id, priority10_sends)
            SELECT x.tenant_id, x.id, array_agg(x.ms ORDER BY x.ms)
              FROM unnest($1::text[], $2::text[], $3::text[]::bigint[]) AS x(tenant_id, id, ms) GROUP BY x.tenant_id, x.id
            ON CONFLICT (tenant_id, target_id) DO UPDATE SET priority10_sends = ARRAY(
                   SELECT k.ms FROM (SELECT s.ms FROM unnest(w.priority10_sends || EXCLUDED.priority10_sends) AS s(ms)
                                      WHERE s.ms > EXCLUDED.priority10_sends[cardinality(EXCLUDED.priority10_sends)] - $4
                                      ORDER BY s.ms DESC LIMIT $5) k ORDER BY k.ms)
            """,
            [
                PostgresTextArray(counted.map(\.op.tenantId)), PostgresTextArray(counted.map(\.op.targetId)),
                PostgresTextArray(counted.map { String($0.op.budgetDecidedAtMs!) }), PriorityBudget.windowMilliseconds,
                PriorityBudget.maxBudget
            ])
    }
}
