-- deploy/bench/writes' fixture (also deploy/bench/writes-ab's): :n targets as a remote start by
-- the sender key leaves them once their token is registered: `ready`, revision 1, covered through
-- created_from. Ids 'tgt_' + :prefix + zero-padded number. psql variables: tenant, inst, st, tv,
-- key, prefix, n. The rows skip triggers (session_replication_role = replica): the insert trigger
-- of 0012 records a `target.ready` event per row, which is no part of the measured write path and
-- made the million-row fixture take minutes; the live-target count (0017) is added in one
-- statement.
SET app.scope = 'system';
SET session_replication_role = replica;
INSERT INTO targets (tenant_id, id, installation_id, start_target_id, created_by_key_id, origin, activity_type, template_version,
                     status, revision, state, push_token, token_status, op_seq)
SELECT :'tenant', 'tgt_' || :'prefix' || lpad(g::text, 25, '0'), :'inst', :'st', :'key', 'remote', 'delivery', :'tv',
       'ready', 1, '{"eta": 1, "status": "preparing"}', repeat('ab', 32), 'registered', 0
  FROM generate_series(1, :n) g;
-- The skipped trigger's count of live targets (migration 0017), when the schema has it.
SET session_replication_role = origin;
SELECT set_config('bench.tenant', :'tenant', false), set_config('bench.n', :'n', false) \g /dev/null
DO $$ BEGIN
  IF to_regclass('live_target_counts') IS NOT NULL THEN
    INSERT INTO live_target_counts AS c (tenant_id, shard, live) VALUES (current_setting('bench.tenant'), 0, current_setting('bench.n')::bigint)
    ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  END IF;
END $$;
