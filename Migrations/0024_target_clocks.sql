-- 0024: the claim's APNs timestamp stamp moves to a narrow table (docs/delivery.md "Claims").
--
-- Every claim wrote each claimed target's last_timestamp (strictly increasing APNs `timestamp`
-- per target, SPEC ordering rules in docs/write-semantics.md). targets rows are wide and carry
-- three statement triggers (0019), so that stamp cost 20 ms of a 65 ms claim of 512 in
-- deploy/bench/dispatch's profile, even as a HOT update. target_clocks holds only the clock: one
-- short row per target that was ever claimed, no triggers, pages half empty so every stamp is a
-- HOT update. An upsert of 512 stamps took ~3 ms where the targets update took 10–15 ms (same
-- rows, same cluster). The claim holds the target's row lock when it stamps, so two claims never
-- race on a row; a target without a row has never been sent (clock 0).
CREATE TABLE target_clocks (
  tenant_id       text COLLATE "C" NOT NULL,
  target_id       text COLLATE "C" NOT NULL,
  last_timestamp  bigint NOT NULL,   -- last APNs `timestamp` (Unix seconds) sent to the target
  PRIMARY KEY (tenant_id, target_id),
  FOREIGN KEY (tenant_id, target_id) REFERENCES targets (tenant_id, id) ON DELETE CASCADE
) WITH (fillfactor = 50);
ALTER TABLE target_clocks ENABLE ROW LEVEL SECURITY;
ALTER TABLE target_clocks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON target_clocks USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id));

-- Every tenant's clocks (row-level security is forced: only the system scope sees them all).
SELECT set_config('app.scope', 'system', true);
INSERT INTO target_clocks (tenant_id, target_id, last_timestamp)
SELECT tenant_id, id, last_timestamp FROM targets WHERE last_timestamp > 0;
SELECT set_config('app.scope', '', true);

ALTER TABLE targets DROP COLUMN last_timestamp;
