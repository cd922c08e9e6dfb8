-- Claims at fan-out (docs/delivery.md "Claims at fan-out"): the fan-out expander inserts the
-- first operation of a member that has nothing queued or in flight directly as `sending` under
-- the dispatcher's lease (FanoutStore.expandBatch with a FanoutClaim). Such a row is in flight
-- from its insert: its target has no claimable head, and had none (the expander checked, under
-- the target's row lock, that nothing of the target was queued or in flight). 0027's insert
-- trigger still locked the target again, probed its queue and ran a head refresh that found
-- nothing to write, per row (~40 µs of the ~385 µs of PostgreSQL time a fan-out push took,
-- pg_stat_statements in deploy/bench/fanout). Now only rows inserted `queued` are refreshed.
-- Nothing else inserts `sending` rows; a `queued` row inserted behind a `sending` one of its
-- target is not the head (0025's probe), as before.
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[]; claiming text := NULLIF(current_setting('liverelay.claim_at_commit', true), '');
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r
     WHERE r.status = 'queued' AND r.id IS DISTINCT FROM claiming;
    IF tn IS NULL THEN RETURN NULL; END IF;
    PERFORM 1 FROM targets t
      JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(tn, tg) AS u(tenant_id, target_id)) x
        ON t.tenant_id = x.tenant_id AND t.id = x.target_id
     ORDER BY t.tenant_id, t.id
       FOR NO KEY UPDATE OF t;
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg
      FROM new_rows r
     WHERE r.status = 'queued' AND r.id IS DISTINCT FROM claiming
       AND COALESCE((SELECT o.seq FROM operations o
                      WHERE o.tenant_id = r.tenant_id AND o.target_id = r.target_id AND o.status IN ('queued', 'sending')
                      ORDER BY o.seq LIMIT 1), r.seq) >= r.seq;  -- none found: refresh (always correct)
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;
