-- 0016: cheaper status changes for the delivery engine (docs/delivery.md "Cost per status change").
--
-- 1. dispatch_heads (0007) is refreshed set-based: one trigger call per statement locks the
--    statement's targets (sorted, FOR NO KEY UPDATE) and recomputes all their heads in one
--    statement, instead of a plpgsql function call per target with three statements each.
--    A target whose operation just became `sending` (a claim) has no claimable head by
--    definition (at most one in flight per target), so its row is simply deleted: the claim
--    already holds the target's row lock.
-- 2. The operation.* events (0012) are inserted per statement from the transition tables
--    instead of per row (their webhook deliveries are still queued by 0012's per-row
--    events_fanout trigger: most events are inserted one at a time, where a per-statement
--    trigger would cost more than it saves).
-- 3. targets keeps free space on each page so the claim's `last_timestamp` stamp (no indexed
--    column changes) can be a HOT update.

CREATE FUNCTION lr_dispatch_heads_refresh_set(p_tenants text[], p_targets text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF cardinality(p_tenants) = 0 THEN RETURN; END IF;
  -- The writers' lock order (target, then its operations); sorted so two refreshes cannot deadlock.
  PERFORM 1 FROM targets t
    JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(p_tenants, p_targets) AS u(tenant_id, target_id)) x
      ON t.tenant_id = x.tenant_id AND t.id = x.target_id
   ORDER BY t.tenant_id, t.id
     FOR NO KEY UPDATE OF t;
  -- A fresh snapshot (next statement): the queues as every locker left them.
  WITH x AS (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(p_tenants, p_targets) AS u(tenant_id, target_id)),
  h AS (
    SELECT x.tenant_id, x.target_id, o.id, o.status, o.next_attempt_at, o.pending_reason
      FROM x LEFT JOIN LATERAL (
           SELECT o.id, o.status, o.next_attempt_at, o.pending_reason FROM operations o
            WHERE o.tenant_id = x.tenant_id AND o.target_id = x.target_id AND o.status IN ('queued', 'sending')
            ORDER BY o.seq LIMIT 1) o ON true
  ), gone AS (
    DELETE FROM dispatch_heads d USING h
     WHERE d.tenant_id = h.tenant_id AND d.target_id = h.target_id
       AND (h.id IS NULL OR h.status <> 'queued' OR COALESCE(h.pending_reason, '') = 'token_pending')
  )
  INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at)
  SELECT h.tenant_id, h.target_id, h.id, h.next_attempt_at FROM h
   WHERE h.id IS NOT NULL AND h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending'
  ON CONFLICT (tenant_id, target_id) DO UPDATE SET operation_id = EXCLUDED.operation_id, due_at = EXCLUDED.due_at
   WHERE (dispatch_heads.operation_id, dispatch_heads.due_at) IS DISTINCT FROM (EXCLUDED.operation_id, EXCLUDED.due_at);
END $$;

-- The single-target refresh (0007) stays for other callers; it now shares the set version.
CREATE OR REPLACE FUNCTION lr_dispatch_head_refresh(p_tenant text, p_target text) RETURNS void
LANGUAGE sql AS $$ SELECT lr_dispatch_heads_refresh_set(ARRAY[p_tenant], ARRAY[p_target]) $$;

-- Inserts (new_rows) and deletes (old_rows): every live operation's target is refreshed.
CREATE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE tn text[]; tg text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r WHERE r.status IN ('queued', 'sending');
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;
DROP TRIGGER dispatch_heads_insert ON operations;
DROP TRIGGER dispatch_heads_delete ON operations;
DROP FUNCTION lr_dispatch_heads_after_insert();
DROP FUNCTION lr_dispatch_heads_after_delete();
CREATE TRIGGER dispatch_heads_insert AFTER INSERT ON operations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_dispatch_heads_after_insert_or_delete();
CREATE TRIGGER dispatch_heads_delete AFTER DELETE ON operations REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_dispatch_heads_after_insert_or_delete();

CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE tn text[]; tg text[];
BEGIN
  -- Claimed (now in flight): the target has no claimable head; the claim holds its row lock.
  -- Every other change recomputes its targets' heads from the table (always right, whatever
  -- else the statement changed).
  DELETE FROM dispatch_heads d USING new_rows n
   WHERE n.status = 'sending' AND d.tenant_id = n.tenant_id AND d.target_id = n.target_id;
  SELECT array_agg(c.tenant_id), array_agg(c.target_id) INTO tn, tg
    FROM (SELECT DISTINCT n.tenant_id, n.target_id
            FROM new_rows n JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.id = n.id
           WHERE n.status <> 'sending' AND (o.status IN ('queued', 'sending') OR n.status = 'queued')
             AND (o.status, o.next_attempt_at, o.pending_reason) IS DISTINCT FROM (n.status, n.next_attempt_at, n.pending_reason)) c;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;

-- operation.accepted / failed / unknown / expired, per statement (same rows and objects as 0012's
-- per-row trigger, which this replaces).
DROP TRIGGER operations_event ON operations;
CREATE FUNCTION lr_operations_events_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events (tenant_id, id, type, target_id, channel_id, dedupe_key, data)
  SELECT n.tenant_id, lr_new_id('evt'), 'operation.' || n.status, n.target_id, NULL, NULL,
         jsonb_build_object('object', lr_operation_object(n))
    FROM new_rows n JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.id = n.id
   WHERE o.status IS DISTINCT FROM n.status AND n.status IN ('accepted', 'failed', 'unknown', 'expired')
   ORDER BY n.tenant_id, n.id
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER operations_events AFTER UPDATE ON operations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_operations_events_stmt();

ALTER TABLE targets SET (fillfactor = 85);
