-- 0043: one statement trigger after an UPDATE of targets instead of three (docs/write-path.md
-- "One trigger after a target update").
--
-- Every UPDATE of targets ran three PL/pgSQL statement triggers, each with its own query over
-- the transition tables: channel member counts (0019), `target.ready` / `target.ended` events
-- (0023) and the live-target count (0019). An update of a target's state changes none of what
-- they read, yet paid for three calls and four queries: about 0.05 ms of a 0.12 ms target update
-- in a single-client pgbench of that statement (docs/write-path.md "What a write returns").
--
-- The three read only the rows' (tenant, id, status, channel, delivery): member counts per
-- (channel, bucket of status and delivery), events where the status became ready or ended, live
-- counts per tenant. When the old and new rows hold the same multiset of those five values, each
-- of the three adds nothing. So one function checks that first, with one query, and returns; else
-- it does what the three did, in the order they fired (alphabetical: channel members, event, live
-- count), with the same statements. INSERT and DELETE keep their triggers, so the UPDATE branches
-- of lr_targets_event_stmt and lr_live_targets_count_stmt are no longer reached: a later change of
-- those bodies belongs in lr_targets_after_update.
CREATE FUNCTION lr_targets_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE a record; before jsonb;
BEGIN
  IF NOT EXISTS (
       SELECT 1
         FROM (SELECT n.tenant_id, n.id, n.status::text AS status, n.channel_id, n.delivery::text AS delivery, 1 AS d FROM lr_new_targets n
               UNION ALL
               SELECT o.tenant_id, o.id, o.status::text, o.channel_id, o.delivery::text, -1 FROM lr_old_targets o) u
        GROUP BY u.tenant_id, u.id, u.status, u.channel_id, u.delivery
       HAVING sum(u.d) <> 0) THEN
    RETURN NULL;
  END IF;

  -- Channel member counts (was lr_channel_members_after_update).
  SELECT array_agg(x.t) AS t, array_agg(x.ch) AS ch, array_agg(x.b) AS b, array_agg(x.d) AS d INTO a
    FROM (SELECT u.t, u.ch, u.b, sum(u.d)::bigint AS d
            FROM (SELECT n.tenant_id AS t, n.channel_id AS ch, lr_channel_bucket(n.status, n.delivery) AS b, 1 AS d
                    FROM lr_new_targets n WHERE n.channel_id IS NOT NULL
                  UNION ALL
                  SELECT o.tenant_id, o.channel_id, lr_channel_bucket(o.status, o.delivery), -1
                    FROM lr_old_targets o WHERE o.channel_id IS NOT NULL) u
           GROUP BY u.t, u.ch, u.b
          HAVING sum(u.d) <> 0) x;
  IF a.t IS NOT NULL THEN PERFORM lr_channel_members_apply(a.t, a.ch, a.b, a.d); END IF;

  -- target.ready / target.ended (the UPDATE branch of lr_targets_event_stmt).
  SELECT jsonb_object_agg(o.tenant_id || ' ' || o.id, o.status) INTO before FROM lr_old_targets o WHERE o.status IN ('ready', 'ended');
  IF EXISTS (SELECT 1 FROM lr_new_targets n
              WHERE n.status IN ('ready', 'ended') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status) THEN
    WITH picked AS (
      SELECT n.tenant_id, n.id, n.status, n.channel_id,
             lr_target_object(n) || jsonb_build_object('channel_id', n.channel_id, 'delivery', n.delivery) AS object,
             row_number() OVER (ORDER BY n.tenant_id, n.id) AS rn
        FROM lr_new_targets n
       WHERE n.status IN ('ready', 'ended') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status
    ), base AS (SELECT lr_reserve_id_us(count(*)) AS us FROM picked)
    INSERT INTO events (tenant_id, id, type, target_id, channel_id, data)
    SELECT p.tenant_id, lr_id_text('evt', b.us + p.rn - 1, uuid_send(gen_random_uuid())), 'target.' || p.status, p.id, p.channel_id,
           jsonb_build_object('object', p.object)
      FROM picked p CROSS JOIN base b
     ORDER BY p.rn;
  END IF;

  -- Live targets per tenant (the UPDATE branch of lr_live_targets_count_stmt).
  INSERT INTO live_target_counts AS c (tenant_id, shard, live)
  SELECT u.tenant_id, (pg_backend_pid() % 64)::smallint, sum(u.d)
    FROM (SELECT n.tenant_id, 1 AS d FROM lr_new_targets n WHERE n.status NOT IN ('ended', 'creation_failed')
          UNION ALL
          SELECT o.tenant_id, -1 FROM lr_old_targets o WHERE o.status NOT IN ('ended', 'creation_failed')) u
   GROUP BY u.tenant_id
  HAVING sum(u.d) <> 0
  ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  RETURN NULL;
END $$;

DROP TRIGGER targets_channel_members_update ON targets;
DROP TRIGGER targets_event_update ON targets;
DROP TRIGGER targets_live_count_update ON targets;
DROP FUNCTION lr_channel_members_after_update();
CREATE TRIGGER targets_after_update AFTER UPDATE ON targets
  REFERENCING OLD TABLE AS lr_old_targets NEW TABLE AS lr_new_targets
  FOR EACH STATEMENT EXECUTE FUNCTION lr_targets_after_update();
