-- 0037: a state-bearing channel write reserves its broadcast's quota unit at commit
-- (docs/channels.md "Quota"; the contract's rule for every state-bearing write).
--
-- Until now a channel write only checked that `1 + fan-out members` units remained and reserved
-- nothing: the broadcast's unit was counted only as used when APNs accepted it. So any number of
-- writes committed against the same remaining units: with one unit left and a broadcast worker
-- that had not caught up, 200 alert writes all got 202 and all were broadcast.
--
-- `quota_held` is 1 while a state-bearing channel operation's broadcast is queued or in flight,
-- else 0. The insert sets it (ChannelStore.insertOperation); the row trigger below clears it when
-- the broadcast leaves `queued`/`sending` whatever the path (accepted, failed, superseded by a
-- newer write, expired, cancelled), and the statement triggers move `push_quota.reserved` by
-- the change, after minus before, per (tenant, day), as the operations' quota trigger does
-- (0008, 0019). An accepted broadcast's unit is counted as used by the broadcaster, as before,
-- in the same transaction. The fan-out sends reserve their own units when the expander queues
-- them (they are operations). Rows written before this migration hold nothing and release
-- nothing.
--
-- Lock order: a channel write locks the channel, then its queued channel operations, then the
-- counter shards (the quota check near the limit, this trigger on its insert); ChannelHandlers
-- .commit. The broadcaster locks one channel operation, then a shard; when APNs no longer knows
-- the channel it ends the members and the channel before it changes its own status
-- (BroadcastStore.apply), so it never waits for the channel while holding a shard. The expander
-- never changes `broadcast_status`, so its updates of channel operations touch no counter.
ALTER TABLE channel_operations ADD COLUMN quota_held smallint NOT NULL DEFAULT 0 CHECK (quota_held IN (0, 1));

CREATE FUNCTION lr_channel_operation_quota_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.broadcast_status IS NULL OR NEW.broadcast_status NOT IN ('queued', 'sending') THEN
    NEW.quota_held := 0;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER channel_operations_quota_release BEFORE UPDATE OF broadcast_status ON channel_operations
  FOR EACH ROW WHEN (OLD.quota_held > 0) EXECUTE FUNCTION lr_channel_operation_quota_release();

CREATE FUNCTION lr_channel_operations_quota() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
    SELECT n.tenant_id, n.quota_day, lr_quota_shard(), sum(n.quota_held), 0
      FROM new_rows n WHERE n.quota_held > 0 AND n.quota_day IS NOT NULL
     GROUP BY n.tenant_id, n.quota_day
    ON CONFLICT (tenant_id, day, shard) DO UPDATE SET reserved = q.reserved + EXCLUDED.reserved;
  ELSE
    INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
    SELECT u.tenant_id, u.quota_day, lr_quota_shard(), sum(u.d), 0
      FROM (SELECT n.tenant_id, n.quota_day, n.quota_held::bigint AS d FROM new_rows n WHERE n.quota_day IS NOT NULL AND n.quota_held > 0
            UNION ALL
            SELECT o.tenant_id, o.quota_day, -o.quota_held::bigint FROM old_rows o WHERE o.quota_day IS NOT NULL AND o.quota_held > 0) u
     GROUP BY u.tenant_id, u.quota_day
    HAVING sum(u.d) <> 0
    ON CONFLICT (tenant_id, day, shard) DO UPDATE SET reserved = q.reserved + EXCLUDED.reserved;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER channel_operations_quota_insert AFTER INSERT ON channel_operations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_channel_operations_quota();
CREATE TRIGGER channel_operations_quota_update AFTER UPDATE ON channel_operations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_channel_operations_quota();
