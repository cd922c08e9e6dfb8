-- 0019: statement triggers that cost O(n) in the rows a statement touches, whatever plan a
-- session cached. Three faults, all found by one statement over many targets (ending the
-- 100,000 broadcast members of a channel in BroadcastStore.finish, a bulk insert, a purge), and
-- the dispatcher's bulk applies of up to 512 operations:
--
-- 1. live_target_counts (0017) was kept by row triggers that upserted the same (tenant, shard)
--    counter row once per target. Inside one transaction every such update leaves a version
--    that cannot be pruned before commit, so each upsert walks a longer chain: O(n^2), and the
--    30 s statement_timeout well before 100,000 rows. Now one upsert per tenant per statement.
-- 2. The target.ready / target.ended trigger (0012, 0015) called lr_target_object(NEW) from
--    PL/pgSQL once per row; a SQL function called that way is set up anew at every call
--    (~0.3 ms): 5,000 targets made ready in one statement spent 2.2 s in it. Now the objects are
--    built in one INSERT ... SELECT per statement (0.4 s for the same 5,000).
-- 3. Statement triggers that joined their OLD and NEW transition tables (0008 quota, 0015
--    channel members, 0016 dispatch heads and operation events) are planned once per session,
--    when the first statement (almost always one row) fires them; the cached plan is a nested
--    loop, so a later statement of n rows compared n^2 pairs (20,000 ended targets: past the
--    statement timeout; a 512-operation apply: 262,144 pairs per trigger). They now pair old
--    and new rows without a join: counters sum (after - before) over a UNION ALL of both
--    tables; the others group that UNION ALL by key, or look the old status up by key in one
--    jsonb object built from the old rows. No plan makes these quadratic. Same rows in, same
--    effect out.
-- 4. Webhook deliveries of new events (0012's events_fanout) are queued per statement, not per
--    event row: with one endpoint, 2,000 single-row event inserts 185 -> 128 ms, one insert of
--    2,000 events 123 -> 84 ms (psql, same cluster, same run); an apply of 512 writes its
--    operation events in one statement.
--
-- PostgreSQL allows no column list (UPDATE OF status) on a trigger with transition tables, so
-- the targets update triggers fire for every UPDATE statement on targets; for a write's one row
-- they aggregate two rows and write nothing unless the status moved.

-- 1. Live targets per tenant (a live target's status is not `ended` / `creation_failed`).
DROP TRIGGER targets_live_count_insert ON targets;
DROP TRIGGER targets_live_count_update ON targets;
DROP TRIGGER targets_live_count_delete ON targets;
DROP FUNCTION lr_live_targets_count();

CREATE FUNCTION lr_live_targets_count_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO live_target_counts AS c (tenant_id, shard, live)
    SELECT n.tenant_id, (pg_backend_pid() % 64)::smallint, count(*)
      FROM lr_new_targets n WHERE n.status NOT IN ('ended', 'creation_failed') GROUP BY n.tenant_id
    ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO live_target_counts AS c (tenant_id, shard, live)
    SELECT o.tenant_id, (pg_backend_pid() % 64)::smallint, -count(*)
      FROM lr_old_targets o WHERE o.status NOT IN ('ended', 'creation_failed') GROUP BY o.tenant_id
    ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  ELSE
    -- Live after minus live before, per tenant: rows that stayed on one side cancel out.
    INSERT INTO live_target_counts AS c (tenant_id, shard, live)
    SELECT u.tenant_id, (pg_backend_pid() % 64)::smallint, sum(u.d)
      FROM (SELECT n.tenant_id, 1 AS d FROM lr_new_targets n WHERE n.status NOT IN ('ended', 'creation_failed')
            UNION ALL
            SELECT o.tenant_id, -1 FROM lr_old_targets o WHERE o.status NOT IN ('ended', 'creation_failed')) u
     GROUP BY u.tenant_id
    HAVING sum(u.d) <> 0
    ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER targets_live_count_insert AFTER INSERT ON targets
  REFERENCING NEW TABLE AS lr_new_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_live_targets_count_stmt();
CREATE TRIGGER targets_live_count_update AFTER UPDATE ON targets
  REFERENCING OLD TABLE AS lr_old_targets NEW TABLE AS lr_new_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_live_targets_count_stmt();
CREATE TRIGGER targets_live_count_delete AFTER DELETE ON targets
  REFERENCING OLD TABLE AS lr_old_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_live_targets_count_stmt();

-- 2. target.ready / target.ended: one event per target that was inserted with, or moved to,
-- status `ready` or `ended` (object: lr_target_object + channel_id and delivery, as 0015).
DROP TRIGGER targets_event_insert ON targets;
DROP TRIGGER targets_event_update ON targets;
DROP FUNCTION lr_targets_event();

CREATE FUNCTION lr_targets_event_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE before jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO events (tenant_id, id, type, target_id, channel_id, data)
    SELECT n.tenant_id, lr_new_id('evt'), 'target.' || n.status, n.id, n.channel_id,
           jsonb_build_object('object', lr_target_object(n) || jsonb_build_object('channel_id', n.channel_id, 'delivery', n.delivery))
      FROM lr_new_targets n
     WHERE n.status IN ('ready', 'ended');
  ELSE
    -- The old status of each row, looked up by key in one jsonb object built first (no join,
    -- and no subquery a plan could rescan per row: see 3.).
    SELECT jsonb_object_agg(o.tenant_id || ' ' || o.id, o.status) INTO before FROM lr_old_targets o WHERE o.status IN ('ready', 'ended');
    INSERT INTO events (tenant_id, id, type, target_id, channel_id, data)
    SELECT n.tenant_id, lr_new_id('evt'), 'target.' || n.status, n.id, n.channel_id,
           jsonb_build_object('object', lr_target_object(n) || jsonb_build_object('channel_id', n.channel_id, 'delivery', n.delivery))
      FROM lr_new_targets n
     WHERE n.status IN ('ready', 'ended') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER targets_event_insert AFTER INSERT ON targets
  REFERENCING NEW TABLE AS lr_new_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_targets_event_stmt();
CREATE TRIGGER targets_event_update AFTER UPDATE ON targets
  REFERENCING OLD TABLE AS lr_old_targets NEW TABLE AS lr_new_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_targets_event_stmt();

-- 3a. Channel member counters (0015): +1 in each row's new bucket, -1 in its old one; rows
-- whose bucket did not change cancel out and touch no channel.
CREATE OR REPLACE FUNCTION lr_channel_members_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE a record;
BEGIN
  SELECT array_agg(x.t) AS t, array_agg(x.ch) AS ch, array_agg(x.b) AS b, array_agg(x.d) AS d INTO a
    FROM (SELECT u.t, u.ch, u.b, sum(u.d)::bigint AS d
            FROM (SELECT n.tenant_id AS t, n.channel_id AS ch, lr_channel_bucket(n.status, n.delivery) AS b, 1 AS d
                    FROM new_rows n WHERE n.channel_id IS NOT NULL
                  UNION ALL
                  SELECT o.tenant_id, o.channel_id, lr_channel_bucket(o.status, o.delivery), -1
                    FROM old_rows o WHERE o.channel_id IS NOT NULL) u
           GROUP BY u.t, u.ch, u.b
          HAVING sum(u.d) <> 0) x;
  IF a.t IS NOT NULL THEN PERFORM lr_channel_members_apply(a.t, a.ch, a.b, a.d); END IF;
  RETURN NULL;
END $$;

-- 3b. Quota counters (0008): reserved = queued/sending, used = accepted/unknown, of operations
-- that consume quota; after minus before, per (tenant, day).
CREATE OR REPLACE FUNCTION lr_quota_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT u.tenant_id, u.quota_day, lr_quota_shard(), sum(u.dr), sum(u.du)
    FROM (SELECT n.tenant_id, n.quota_day, (n.status IN ('queued', 'sending'))::int AS dr, (n.status IN ('accepted', 'unknown'))::int AS du
            FROM new_rows n WHERE n.consumes_quota AND n.quota_day IS NOT NULL AND n.status IN ('queued', 'sending', 'accepted', 'unknown')
          UNION ALL
          SELECT o.tenant_id, o.quota_day, -(o.status IN ('queued', 'sending'))::int, -(o.status IN ('accepted', 'unknown'))::int
            FROM old_rows o WHERE o.consumes_quota AND o.quota_day IS NOT NULL AND o.status IN ('queued', 'sending', 'accepted', 'unknown')) u
   GROUP BY u.tenant_id, u.quota_day
  HAVING sum(u.dr) <> 0 OR sum(u.du) <> 0
  ON CONFLICT (tenant_id, day, shard) DO UPDATE
     SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  RETURN NULL;
END $$;

-- 3c. Dispatch heads (0016): the same targets refreshed as before.
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE tn text[]; tg text[];
BEGIN
  -- Claimed (now in flight): the target has no claimable head; the claim holds its row lock.
  -- Every other change recomputes its targets' heads from the table.
  DELETE FROM dispatch_heads d USING new_rows n
   WHERE n.status = 'sending' AND d.tenant_id = n.tenant_id AND d.target_id = n.target_id;
  SELECT array_agg(c.tenant_id), array_agg(c.target_id) INTO tn, tg
    FROM (SELECT DISTINCT p.tenant_id, p.target_id
            FROM (SELECT u.tenant_id, max(u.target_id) AS target_id,
                         max(u.status) FILTER (WHERE u.old) AS os, max(u.status) FILTER (WHERE NOT u.old) AS ns,
                         max(u.next_attempt_at) FILTER (WHERE u.old) AS onext, max(u.next_attempt_at) FILTER (WHERE NOT u.old) AS nnext,
                         max(u.pending_reason) FILTER (WHERE u.old) AS opr, max(u.pending_reason) FILTER (WHERE NOT u.old) AS npr
                    FROM (SELECT o.tenant_id, o.id, o.target_id, o.status, o.next_attempt_at, o.pending_reason, true AS old FROM old_rows o
                          UNION ALL
                          SELECT n.tenant_id, n.id, n.target_id, n.status, n.next_attempt_at, n.pending_reason, false FROM new_rows n) u
                   GROUP BY u.tenant_id, u.id) p
           WHERE p.ns <> 'sending' AND (p.os IN ('queued', 'sending') OR p.ns = 'queued')
             AND (p.os, p.onext, p.opr) IS DISTINCT FROM (p.ns, p.nnext, p.npr)) c;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;

-- 3d. operation.accepted / failed / unknown / expired (0016): same rows and objects.
CREATE OR REPLACE FUNCTION lr_operations_events_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE before jsonb;
BEGIN
  -- The old status of each row, looked up by key in one jsonb object built first (see 3.).
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

-- 4. Deliveries of new events, per statement (same rows as 0012's row trigger).
DROP TRIGGER events_fanout ON events;
DROP FUNCTION lr_events_fanout();

CREATE FUNCTION lr_events_fanout_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- webhook.test is queued by its endpoint only.
  INSERT INTO webhook_deliveries (tenant_id, endpoint_id, event_id, event_type, event_created_at)
  SELECT n.tenant_id, e.id, n.id, n.type, n.created_at
    FROM lr_new_events n JOIN webhook_endpoints e ON e.tenant_id = n.tenant_id
   WHERE n.type <> 'webhook.test' AND e.status = 'enabled' AND (e.events @> ARRAY[n.type] OR e.events @> ARRAY['*']);
  RETURN NULL;
END $$;
CREATE TRIGGER events_fanout AFTER INSERT ON events
  REFERENCING NEW TABLE AS lr_new_events
  FOR EACH STATEMENT EXECUTE FUNCTION lr_events_fanout_stmt();
