-- 0025: the insert trigger's head check is one index probe per inserted row again
-- (docs/delivery.md "Claims", docs/write-path.md "Triggers that change nothing").
--
-- 0022 asked whether an inserted operation is its target's oldest live one with
-- NOT EXISTS (an older live operation). PostgreSQL may turn NOT EXISTS into an anti-join, and
-- with statistics taken before a bulk insert (every estimate one row; the transition table
-- estimated at 100 rows) it chose a nested loop that compared every inserted row with every
-- live operation of the cluster: 100,000,000 comparisons and 6.4 s for one INSERT of 10,000
-- operations (auto_explain in deploy/bench/dispatch's setup); a fan-out batch of 500 beside
-- 100,000 queued operations would compare 50 million pairs. A scalar subquery is never
-- flattened into a join: for each inserted row it reads the target's first live seq from
-- operations_live (tenant_id, target_id, seq), whatever the statistics say. Same rule as 0022
-- (the row is the head when no live operation of its target has a lower seq; the row itself
-- is live and visible, so the first live seq is at most its own).
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r WHERE r.status IN ('queued', 'sending');
    IF tn IS NULL THEN RETURN NULL; END IF;
    PERFORM 1 FROM targets t
      JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(tn, tg) AS u(tenant_id, target_id)) x
        ON t.tenant_id = x.tenant_id AND t.id = x.target_id
     ORDER BY t.tenant_id, t.id
       FOR NO KEY UPDATE OF t;
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg
      FROM new_rows r
     WHERE r.status IN ('queued', 'sending')
       AND COALESCE((SELECT o.seq FROM operations o
                      WHERE o.tenant_id = r.tenant_id AND o.target_id = r.target_id AND o.status IN ('queued', 'sending')
                      ORDER BY o.seq LIMIT 1), r.seq) >= r.seq;  -- none found: refresh (always correct)
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;
