-- 0017: cheaper writes (docs/write-path.md "Profile").
--
-- 1. operations_target_queued (0008) goes: a target's queued operations are found through
--    operations_live (0007: the same key, for `queued` and `sending`; a target has at most one
--    operation in flight), so every insert and status change of an operation maintains one
--    index less.
-- 2. Live targets per tenant are counted, not scanned: live_target_counts holds 64 shards per
--    tenant (the session's shard, pg_backend_pid() % 64, as push_quota does), kept exact by
--    row triggers on targets whatever code creates, ends or deletes a target. A live target is
--    one whose status is not `ended` / `creation_failed`. The per-tenant cap check
--    (TenantCapStore, docs/security.md "Per-tenant caps") sums at most 64 rows instead of
--    counting up to the cap's number of index entries on every start. The triggers' WHEN
--    conditions are false for every update that does not move a target in or out of the live
--    set, so plain state updates queue no trigger event at all.

DROP INDEX operations_target_queued;

CREATE TABLE live_target_counts (
  tenant_id  text COLLATE "C" NOT NULL,
  shard      smallint NOT NULL CHECK (shard BETWEEN 0 AND 63),
  live       bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, shard)
);
ALTER TABLE live_target_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE live_target_counts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON live_target_counts USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id));

CREATE FUNCTION lr_live_targets_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE t text; d int;
BEGIN
  IF TG_OP = 'INSERT' THEN t := NEW.tenant_id; d := 1;
  ELSIF TG_OP = 'DELETE' THEN t := OLD.tenant_id; d := -1;
  ELSIF NEW.status IN ('ended', 'creation_failed') THEN t := NEW.tenant_id; d := -1;
  ELSE t := NEW.tenant_id; d := 1;
  END IF;
  INSERT INTO live_target_counts AS c (tenant_id, shard, live) VALUES (t, (pg_backend_pid() % 64)::smallint, d)
  ON CONFLICT (tenant_id, shard) DO UPDATE SET live = c.live + EXCLUDED.live;
  RETURN NULL;
END $$;

CREATE TRIGGER targets_live_count_insert AFTER INSERT ON targets FOR EACH ROW
  WHEN (NEW.status NOT IN ('ended', 'creation_failed'))
  EXECUTE FUNCTION lr_live_targets_count();
CREATE TRIGGER targets_live_count_update AFTER UPDATE OF status ON targets FOR EACH ROW
  WHEN ((OLD.status IN ('ended', 'creation_failed')) IS DISTINCT FROM (NEW.status IN ('ended', 'creation_failed')))
  EXECUTE FUNCTION lr_live_targets_count();
CREATE TRIGGER targets_live_count_delete AFTER DELETE ON targets FOR EACH ROW
  WHEN (OLD.status NOT IN ('ended', 'creation_failed'))
  EXECUTE FUNCTION lr_live_targets_count();

-- Backfill (system scope for this statement only: row-level security would hide other tenants).
SELECT set_config('app.scope', 'system', true);
INSERT INTO live_target_counts (tenant_id, shard, live)
SELECT tenant_id, 0, count(*) FROM targets WHERE status NOT IN ('ended', 'creation_failed') GROUP BY tenant_id;
SELECT set_config('app.scope', '', true);
