-- 0022: trigger work that changes nothing is skipped
-- (docs/write-path.md "Triggers that change nothing"; docs/delivery.md "Claims").
--
-- An update inserts its operation while the operation it supersedes is still queued, then marks
-- that one superseded. The insert's head refresh (0016) recomputed a head that could not have
-- moved: the target's oldest live operation was still the older one. A profile of the update
-- transaction put that refresh at 108 µs of the statement's 284 µs (pg_stat_statements,
-- track = all, one client). And both event triggers ran an INSERT … SELECT that selected nothing
-- on every plain update (17–22 µs each).

-- 1. Inserted operations: lock their targets as the refresh does (the writers' lock order,
--    sorted), then refresh only the targets where an inserted row is the oldest live operation
--    (read in the next statement, so with every locker's changes visible). Any other live row
--    of the target is older, so its head is that row's business, and whoever changes that row
--    refreshes the head after this transaction's insert is visible to it (it takes the same
--    target lock first). Deletes refresh every target, as before.
--    This holds while these stay true (all code paths keep them today): seq comes from the target's
--    op_seq under the target's row lock and only grows; no UPDATE changes seq or target_id; no
--    terminal operation becomes queued or sending again; only a target's head becomes sending.
--    A feature that re-queues a failed or unknown operation must refresh its target's head itself.
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r WHERE r.status IN ('queued', 'sending');
    IF tn IS NULL THEN RETURN NULL; END IF;
    PERFORM 1 FROM targets t
      JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(tn, tg) AS u(tenant_id, target_id)) x
        ON t.tenant_id = x.tenant_id AND t.id = x.target_id
     ORDER BY t.tenant_id, t.id
       FOR NO KEY UPDATE OF t;
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg
      FROM new_rows r
     WHERE r.status IN ('queued', 'sending')
       AND NOT EXISTS (SELECT 1 FROM operations o
                        WHERE o.tenant_id = r.tenant_id AND o.target_id = r.target_id AND o.status IN ('queued', 'sending')
                          AND o.seq < r.seq);
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;

-- 2. operation.* events (0019's body): nothing to insert unless a row reached an event status.
CREATE OR REPLACE FUNCTION lr_operations_events_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE before jsonb;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status IN ('accepted', 'failed', 'unknown', 'expired')) THEN
    RETURN NULL;
  END IF;
  SELECT jsonb_object_agg(o.tenant_id || ' ' || o.id, o.status) INTO before
    FROM old_rows o WHERE o.status IN ('accepted', 'failed', 'unknown', 'expired');
  INSERT INTO events (tenant_id, id, type, target_id, channel_id, dedupe_key, data)
  SELECT n.tenant_id, lr_new_id('evt'), 'operation.' || n.status, n.target_id, NULL, NULL,
         jsonb_build_object('object', lr_operation_object(n))
    FROM new_rows n
   WHERE n.status IN ('accepted', 'failed', 'unknown', 'expired') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status
   ORDER BY n.tenant_id, n.id
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;

-- 3. target.ready / target.ended (0019's body): one event per target inserted with, or moved to,
--    one of those statuses. An UPDATE returns before the insert when no row moved, which a plain
--    state write never does. For an INSERT `before` stays NULL, so every row in those statuses counts.
CREATE OR REPLACE FUNCTION lr_targets_event_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE before jsonb;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    -- The old status of each row, looked up by key in one jsonb object built first (0019, 3.).
    SELECT jsonb_object_agg(o.tenant_id || ' ' || o.id, o.status) INTO before FROM lr_old_targets o WHERE o.status IN ('ready', 'ended');
    IF NOT EXISTS (SELECT 1 FROM lr_new_targets n
                    WHERE n.status IN ('ready', 'ended') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status) THEN
      RETURN NULL;
    END IF;
  END IF;
  INSERT INTO events (tenant_id, id, type, target_id, channel_id, data)
  SELECT n.tenant_id, lr_new_id('evt'), 'target.' || n.status, n.id, n.channel_id,
         jsonb_build_object('object', lr_target_object(n) || jsonb_build_object('channel_id', n.channel_id, 'delivery', n.delivery))
    FROM lr_new_targets n
   WHERE n.status IN ('ready', 'ended') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status;
  RETURN NULL;
END $$;
