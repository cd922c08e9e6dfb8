-- 0041: an update or an end keeps the quota counters of its own insert and supersede (docs/
-- write-path.md "Quota kept by the writer").
--
-- An update that replaces a queued state-only update reserved one unit (the insert trigger's
-- upsert of the session's push_quota shard row) and released one (the supersede's trigger, a
-- second upsert of the same row): two trigger calls and two upserts for a net change of zero,
-- and then the fast quota path read every shard row again to re-check a reservation that did
-- not grow. pg_stat_statements in deploy/bench/writes (BENCH_PROFILE=1): the two upserts were
-- 0.116 ms of the 1.297 ms an update spent in PostgreSQL statements, the re-check 0.055 ms.
--
-- The writer knows both sides: the operation it inserts (its quota day, when it consumes quota)
-- and the queued operations it supersedes, locked in its first round trip with their quota days.
-- So it names its operation in `liverelay.quota_by_writer` (SET LOCAL, in the same statement as
-- `liverelay.head_by_writer`) and adds the net change per day to its session's shard row itself,
-- in one statement per day whose change is not zero (QuotaStore.adjustReservedSQL); none when it
-- replaces a reservation of the same day. The triggers leave to the writer exactly those rows:
-- - the insert trigger skips the row whose id is the writer's operation;
-- - the update trigger skips rows the writer's operation superseded (status 'superseded',
--   superseded_by the writer's operation), and returns at once when every updated row is one.
-- Every other statement, the writer's claim at commit included, is counted as before; with the
-- setting unset (every other writer) both functions behave as before.
CREATE OR REPLACE FUNCTION lr_quota_after_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE writer text := NULLIF(current_setting('liverelay.quota_by_writer', true), '');
BEGIN
  IF writer IS NOT NULL AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.id IS DISTINCT FROM writer) THEN
    RETURN NULL;
  END IF;
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT tenant_id, quota_day, lr_quota_shard(),
         count(*) FILTER (WHERE status IN ('queued', 'sending')),
         count(*) FILTER (WHERE status IN ('accepted', 'unknown'))
    FROM new_rows
   WHERE consumes_quota AND quota_day IS NOT NULL AND status IN ('queued', 'sending', 'accepted', 'unknown')
     AND id IS DISTINCT FROM writer
   GROUP BY tenant_id, quota_day
  ON CONFLICT (tenant_id, day, shard) DO UPDATE
     SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION lr_quota_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE writer text := NULLIF(current_setting('liverelay.quota_by_writer', true), '');
BEGIN
  IF writer IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status IS DISTINCT FROM 'superseded' OR n.superseded_by IS DISTINCT FROM writer) THEN
    RETURN NULL;
  END IF;
  INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
  SELECT u.tenant_id, u.quota_day, lr_quota_shard(), sum(u.dr), sum(u.du)
    FROM (SELECT n.tenant_id, n.quota_day, (n.status IN ('queued', 'sending'))::int AS dr, (n.status IN ('accepted', 'unknown'))::int AS du
            FROM new_rows n
           WHERE n.consumes_quota AND n.quota_day IS NOT NULL AND n.status IN ('queued', 'sending', 'accepted', 'unknown')
          UNION ALL
          SELECT o.tenant_id, o.quota_day, -(o.status IN ('queued', 'sending'))::int, -(o.status IN ('accepted', 'unknown'))::int
            FROM old_rows o
           WHERE o.consumes_quota AND o.quota_day IS NOT NULL AND o.status IN ('queued', 'sending', 'accepted', 'unknown')
             AND (writer IS NULL
                  OR NOT EXISTS (SELECT 1 FROM new_rows n
                                  WHERE n.tenant_id = o.tenant_id AND n.id = o.id AND n.status = 'superseded' AND n.superseded_by = writer))) u
   GROUP BY u.tenant_id, u.quota_day
  HAVING sum(u.dr) <> 0 OR sum(u.du) <> 0
  ON CONFLICT (tenant_id, day, shard) DO UPDATE
     SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  RETURN NULL;
END $$;
