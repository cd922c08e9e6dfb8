-- 0026: the priority-10 window moves beside the clock (docs/priority-budget.md, docs/delivery.md "Claims").
--
-- The dispatcher records each counted priority-10 send in its target's sliding 60-minute
-- window (0018) when it applies results. That was one more UPDATE of the wide targets rows per
-- apply, with their three statement triggers: 726 ms of the 4,435 ms that 60 bulk applies took
-- in deploy/bench/dispatch (pg_stat_statements), ~24 µs per push. target_clocks (0024) already
-- holds one narrow row per claimed target, written by the claim under the target's row lock;
-- the window joins it there, so recording it is a HOT update of that row. The claim reads
-- both columns from it, and the target object (API and events) reads the window from it.
ALTER TABLE target_clocks ALTER COLUMN last_timestamp SET DEFAULT 0;
ALTER TABLE target_clocks ADD COLUMN priority10_sends bigint[] NOT NULL DEFAULT '{}';

-- Every tenant's windows (row-level security is forced: only the system scope sees them all).
SELECT set_config('app.scope', 'system', true);
INSERT INTO target_clocks AS k (tenant_id, target_id, priority10_sends)
SELECT tenant_id, id, priority10_sends FROM targets WHERE cardinality(priority10_sends) > 0
ON CONFLICT (tenant_id, target_id) DO UPDATE SET priority10_sends = EXCLUDED.priority10_sends;
SELECT set_config('app.scope', '', true);

-- Priority-10 sends of a target in the window ending now (NULL for Android); 0018's rule.
CREATE OR REPLACE FUNCTION lr_priority10_sent_last_hour(t targets) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN (SELECT i.platform FROM installations i WHERE i.tenant_id = t.tenant_id AND i.id = t.installation_id) <> 'ios' THEN NULL
              ELSE (SELECT count(*)::int
                      FROM target_clocks k CROSS JOIN LATERAL unnest(k.priority10_sends) AS s(ms)
                     WHERE k.tenant_id = t.tenant_id AND k.target_id = t.id
                       AND s.ms > floor(extract(epoch FROM now()) * 1000)::bigint - 3600000) END
$$;

ALTER TABLE targets DROP COLUMN priority10_sends;
