-- 0019: the priority-10 budget (docs/priority-budget.md); the installation attributes it uses
-- (frequent_updates) came with 0014. Number 0019 is provisional (the assigned 0014 landed on main
-- with the installation columns only, and a landed migration is never edited).
--
-- Tenant budgets: NULL = the deployment default (LIVERELAY_PRIORITY10_HOURLY_BUDGET,
-- LIVERELAY_FREQUENT_UPDATES_HOURLY_BUDGET), which every LiveRelay transaction passes as the
-- transaction-local settings liverelay.priority10_hourly_budget and
-- liverelay.frequent_updates_hourly_budget (Database's settings; 40 and 240 when absent).
ALTER TABLE tenants
  ADD COLUMN priority10_hourly_budget int CHECK (priority10_hourly_budget BETWEEN 0 AND 1000),
  ADD COLUMN frequent_updates_hourly_budget int CHECK (frequent_updates_hourly_budget BETWEEN 0 AND 1000);

-- Per target, the epoch milliseconds of its priority-10 sends in the last 60 minutes, oldest
-- first, at most 1000 (the largest budget): the count is read from the row, never from a scan of
-- the target's operations. Written in bulk by the dispatcher when it applies results
-- (DispatchStore.recordPriority10Sends); no trigger.
ALTER TABLE targets ADD COLUMN priority10_sends bigint[] NOT NULL DEFAULT '{}';

-- The priority a push of the operation was last sent (or is being sent) at, when it differs
-- from the requested `priority` (a downgrade); NULL = as requested. Written at claim time.
ALTER TABLE operations ADD COLUMN sent_priority smallint CHECK (sent_priority IN (1, 5, 10));

-- The budget that applies to a target of installation (p_tenant, p_installation): NULL for
-- Android (no budget). Keep in step with LiveRelayStore's PriorityBudgetSQL.budget.
CREATE FUNCTION lr_priority10_budget(p_tenant text, p_installation text) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN i.platform <> 'ios' THEN NULL
              WHEN i.frequent_updates THEN COALESCE(n.frequent_updates_hourly_budget,
                                                    NULLIF(current_setting('liverelay.frequent_updates_hourly_budget', true), '')::int, 240)
              ELSE COALESCE(n.priority10_hourly_budget, NULLIF(current_setting('liverelay.priority10_hourly_budget', true), '')::int, 40) END
    FROM installations i JOIN tenants n ON n.tenant_id = i.tenant_id
   WHERE i.tenant_id = p_tenant AND i.id = p_installation
$$;

-- Priority-10 sends of a target in the window ending now (NULL for Android).
CREATE FUNCTION lr_priority10_sent_last_hour(t targets) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN (SELECT i.platform FROM installations i WHERE i.tenant_id = t.tenant_id AND i.id = t.installation_id) <> 'ios' THEN NULL
              ELSE (SELECT count(*)::int FROM unnest(t.priority10_sends) AS s(ms)
                     WHERE s.ms > floor(extract(epoch FROM now()) * 1000)::bigint - 3600000) END
$$;

-- The event objects carry the new fields exactly as Encode.operation / Encode.target do.
CREATE OR REPLACE FUNCTION lr_operation_object(o operations) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', o.id, 'object', 'operation', 'target_id', o.target_id, 'kind', o.kind, 'status', o.status,
    'pending_reason', o.pending_reason, 'revision', o.revision, 'superseded_by', o.superseded_by, 'apns_id', o.apns_id,
    'failure', o.failure, 'consumes_quota', o.consumes_quota, 'has_alert', o.alert IS NOT NULL,
    'priority', COALESCE(o.sent_priority, o.priority), 'requested_priority', o.priority,
    'priority_downgraded', COALESCE(o.sent_priority < o.priority, false),
    'expires_at', lr_ts(o.expires_at), 'created_at', lr_ts(o.created_at), 'updated_at', lr_ts(o.updated_at),
    'accepted_at', lr_ts(o.accepted_at))
$$;

CREATE OR REPLACE FUNCTION lr_target_object(t targets) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', t.id, 'object', 'target', 'status', t.status, 'end_reason', t.end_reason, 'revision', t.revision,
    'token_status', t.token_status, 'origin', t.origin, 'installation_id', t.installation_id,
    'start_target_id', t.start_target_id, 'activity_type', t.activity_type, 'template_version', t.template_version,
    'business_key', t.business_key, 'business_generation', t.business_generation, 'stale_at', lr_ts(t.stale_at),
    'relevance_score', t.relevance_score,
    'last_render_report', CASE WHEN jsonb_typeof(t.last_render_report) = 'object' AND jsonb_typeof(t.last_render_report -> 'revision') = 'number'
                               THEN t.last_render_report || jsonb_build_object('stale', (t.last_render_report ->> 'revision')::numeric < t.revision)
                               ELSE t.last_render_report END,
    'priority10_sent_last_hour', lr_priority10_sent_last_hour(t),
    'priority10_budget', lr_priority10_budget(t.tenant_id, t.installation_id),
    'created_at', lr_ts(t.created_at), 'updated_at', lr_ts(t.updated_at), 'started_at', lr_ts(t.started_at),
    'ended_at', lr_ts(t.ended_at))
$$;
