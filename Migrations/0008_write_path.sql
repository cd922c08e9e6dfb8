-- 0008: the write path's constant-cost quota and its queued-operations index (docs/write-path.md).
--
-- Quota counters. push_quota (0003) now holds BOTH halves of a tenant-day's quota, kept exact
-- by the triggers below whatever code changes an operation (writes, the dispatcher, cleanup,
-- retention):
--   reserved = state-bearing operations of that day in `queued` or `sending`
--   used     = state-bearing operations of that day in `accepted` or `unknown`
--              (an unknown outcome may have reached the device, so it counts as used)
-- Leaving those states (superseded, cancelled, failed, expired) releases the unit. Deleting an
-- operation releases a reservation but never gives back a used unit (used is history).
-- Each statement adds its deltas to ONE shard row chosen by the session (pg_backend_pid() % 64),
-- so concurrent writers of one tenant rarely wait on each other's counter row; only the sum
-- over a (tenant, day)'s shards means anything. The write path reads that sum (at most 64 rows
-- of an index range) instead of counting queued operations.

ALTER TABLE push_quota DROP CONSTRAINT push_quota_shard_check;
ALTER TABLE push_quota ADD CONSTRAINT push_quota_shard_check CHECK (shard BETWEEN 0 AND 63);

CREATE FUNCTION lr_quota_shard() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT (pg_backend_pid() % 64)::smallint $$;

-- AFTER INSERT, per statement (transition table new_rows).
CREATE FUNCTION lr_quota_after_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT tenant_id, quota_day, lr_quota_shard(),
         count(*) FILTER (WHERE status IN ('queued', 'sending')),
         count(*) FILTER (WHERE status IN ('accepted', 'unknown'))
    FROM new_rows
   WHERE consumes_quota AND quota_day IS NOT NULL AND status IN ('queued', 'sending', 'accepted', 'unknown')
   GROUP BY tenant_id, quota_day
  ON CONFLICT (tenant_id, day, shard) DO UPDATE
     SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  RETURN NULL;
END $$;

-- AFTER UPDATE, per statement (old_rows/new_rows): only rows whose status changed count.
CREATE FUNCTION lr_quota_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT d.tenant_id, d.quota_day, lr_quota_shard(), sum(d.dr), sum(d.du)
    FROM (SELECT n.tenant_id, n.quota_day,
                 (n.status IN ('queued', 'sending'))::int - (o.status IN ('queued', 'sending'))::int AS dr,
                 (n.status IN ('accepted', 'unknown'))::int - (o.status IN ('accepted', 'unknown'))::int AS du
            FROM old_rows o JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
           WHERE n.consumes_quota AND n.quota_day IS NOT NULL AND n.status IS DISTINCT FROM o.status) d
   WHERE d.dr <> 0 OR d.du <> 0
   GROUP BY d.tenant_id, d.quota_day
  ON CONFLICT (tenant_id, day, shard) DO UPDATE
     SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  RETURN NULL;
END $$;

-- AFTER DELETE, per statement (old_rows): a deleted reservation is released.
CREATE FUNCTION lr_quota_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT tenant_id, quota_day, lr_quota_shard(), -count(*), 0
    FROM old_rows
   WHERE consumes_quota AND quota_day IS NOT NULL AND status IN ('queued', 'sending')
   GROUP BY tenant_id, quota_day
  ON CONFLICT (tenant_id, day, shard) DO UPDATE SET reserved = q.reserved + EXCLUDED.reserved;
  RETURN NULL;
END $$;

CREATE TRIGGER operations_quota_insert AFTER INSERT ON operations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_quota_after_insert();
CREATE TRIGGER operations_quota_update AFTER UPDATE ON operations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_quota_after_update();
CREATE TRIGGER operations_quota_delete AFTER DELETE ON operations
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_quota_after_delete();

-- Backfill: reserved from the operations themselves (0003 derived it by counting), used as the
-- dispatcher counted it so far. Row-level security would hide other tenants' rows: system scope.
SELECT set_config('app.scope', 'system', true);
UPDATE push_quota SET reserved = 0 WHERE reserved <> 0;
INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
SELECT tenant_id, quota_day, 0, count(*), 0
  FROM operations
 WHERE consumes_quota AND quota_day IS NOT NULL AND status IN ('queued', 'sending')
 GROUP BY tenant_id, quota_day
ON CONFLICT (tenant_id, day, shard) DO UPDATE SET reserved = EXCLUDED.reserved;

-- The reserved count no longer scans operations.
DROP INDEX operations_quota_reserved;

-- A target's queued operations (what a new write may supersede), without walking its history.
CREATE INDEX operations_target_queued ON operations (tenant_id, target_id, seq) WHERE status = 'queued';
