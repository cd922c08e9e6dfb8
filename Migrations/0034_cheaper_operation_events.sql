-- 0034: a cheaper operation event (docs/webhooks.md "Events"; docs/delivery.md "Applying results").
--
-- Every applied push writes one `operation.accepted` (or failed, unknown, expired) event in the
-- apply's transaction; in a 100,000-member fan-out that insert was the largest single cost of
-- a push (pg_stat_statements in deploy/bench/fanout: ~60 µs of PostgreSQL time per event under
-- load). Two parts of it bought nothing:
--
-- 1. `ON CONFLICT DO NOTHING` (left from 0016, when every event took a dedupe key). An
--    operation event has no dedupe key, and its id is new (lr_reserve_id_us: microseconds
--    reserved per statement, plus 62 random bits), so no insert can conflict; the clause only
--    made each row a speculative insertion (a pre-check of both unique indexes and a
--    speculative token per row). 100,000 events in one statement: 3.37 s with it, 2.81 s
--    without (psql, this machine).
-- 2. `events_created` (0012), an index on `created_at` read only by the 30-day retention
--    purge. Event ids are time-ordered (their first 48 bits are Unix milliseconds), so the
--    purge now walks each tenant's primary-key range below the id of the cut-off instant
--    (EventStore.purgeExpired), and no insert writes a fifth index entry: 3.37 s → 3.05 s for
--    the same 100,000 events.
CREATE OR REPLACE FUNCTION lr_operations_events_stmt() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE before jsonb;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status IN ('accepted', 'failed', 'unknown', 'expired')) THEN
    RETURN NULL;
  END IF;
  SELECT jsonb_object_agg(o.tenant_id || ' ' || o.id, o.status) INTO before
    FROM old_rows o WHERE o.status IN ('accepted', 'failed', 'unknown', 'expired');
  WITH picked AS (
    SELECT n.tenant_id, n.target_id, n.status, lr_operation_object(n) AS object, row_number() OVER (ORDER BY n.tenant_id, n.id) AS rn
      FROM new_rows n
     WHERE n.status IN ('accepted', 'failed', 'unknown', 'expired') AND (before ->> (n.tenant_id || ' ' || n.id)) IS DISTINCT FROM n.status
  ), base AS (SELECT lr_reserve_id_us(count(*)) AS us FROM picked)
  INSERT INTO events (tenant_id, id, type, target_id, channel_id, dedupe_key, data)
  SELECT p.tenant_id, lr_id_text('evt', b.us + p.rn - 1, uuid_send(gen_random_uuid())), 'operation.' || p.status, p.target_id, NULL, NULL,
         jsonb_build_object('object', p.object)
    FROM picked p CROSS JOIN base b
   ORDER BY p.rn;
  RETURN NULL;
END $$;

DROP INDEX events_created;
