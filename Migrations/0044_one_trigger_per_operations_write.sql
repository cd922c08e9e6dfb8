-- 0044: one statement trigger after an INSERT of operations instead of two, and one after an
-- UPDATE instead of three (docs/write-path.md "One trigger per operations write").
--
-- An update's insert ran the dispatch-head trigger and the quota trigger; its supersede ran the
-- dispatch-head, operation-event and quota triggers. Since 0040 and 0041 the writer keeps the
-- head and the quota counters of both statements itself, and a supersede is no event, so all five
-- calls only looked at the transition table to find they had nothing to do: five PL/pgSQL calls
-- and five queries per update (0043 did the same for the target row's three triggers).
--
-- Each new function first asks, with one query, whether the statement is exactly the writer's
-- (its operation's insert; or a supersede of rows by its operation only), and the writer keeps
-- both the head and the quota (`liverelay.head_by_writer` and `liverelay.quota_by_writer` name the
-- same operation): then it returns. Otherwise it runs the bodies of the triggers it replaces,
-- unchanged and in the order they fired (alphabetical: dispatch heads, then operation events,
-- then quota counters). DELETE keeps its two triggers, so the INSERT branch of
-- lr_dispatch_heads_after_insert_or_delete is no longer reached: a later change of that body
-- belongs in lr_operations_after_insert. The insert function keeps the heads trigger's
-- plan_cache_mode = force_generic_plan, which now also covers the quota upsert (no join, no
-- parameter but the writer's id).
CREATE FUNCTION lr_operations_after_insert() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[]; claiming text := NULLIF(current_setting('liverelay.claim_at_commit', true), '');
        writer text := NULLIF(current_setting('liverelay.head_by_writer', true), '');
        qwriter text := NULLIF(current_setting('liverelay.quota_by_writer', true), '');
BEGIN
  IF writer IS NOT NULL AND qwriter = writer AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.id IS DISTINCT FROM writer) THEN
    RETURN NULL;
  END IF;

  -- Dispatch heads (the INSERT branch of lr_dispatch_heads_after_insert_or_delete, 0040).
  SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r
   WHERE r.status = 'queued' AND r.id IS DISTINCT FROM claiming AND r.id IS DISTINCT FROM writer;
  IF tn IS NOT NULL THEN
    PERFORM 1 FROM targets t
      JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(tn, tg) AS u(tenant_id, target_id)) x
        ON t.tenant_id = x.tenant_id AND t.id = x.target_id
     ORDER BY t.tenant_id, t.id
       FOR NO KEY UPDATE OF t;
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg
      FROM new_rows r
     WHERE r.status = 'queued' AND r.id IS DISTINCT FROM claiming AND r.id IS DISTINCT FROM writer
       AND COALESCE((SELECT o.seq FROM operations o
                      WHERE o.tenant_id = r.tenant_id AND o.target_id = r.target_id AND o.status IN ('queued', 'sending')
                      ORDER BY o.seq LIMIT 1), r.seq) >= r.seq;  -- none found: refresh (always correct)
    IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  END IF;

  -- Quota counters (lr_quota_after_insert, 0041).
  IF qwriter IS NULL OR EXISTS (SELECT 1 FROM new_rows n WHERE n.id IS DISTINCT FROM qwriter) THEN
    INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
    SELECT tenant_id, quota_day, lr_quota_shard(),
           count(*) FILTER (WHERE status IN ('queued', 'sending')),
           count(*) FILTER (WHERE status IN ('accepted', 'unknown'))
      FROM new_rows
     WHERE consumes_quota AND quota_day IS NOT NULL AND status IN ('queued', 'sending', 'accepted', 'unknown')
       AND id IS DISTINCT FROM qwriter
     GROUP BY tenant_id, quota_day
    ON CONFLICT (tenant_id, day, shard) DO UPDATE
       SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION lr_operations_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE tn text[]; tg text[]; before jsonb;
        writer text := NULLIF(current_setting('liverelay.head_by_writer', true), '');
        qwriter text := NULLIF(current_setting('liverelay.quota_by_writer', true), '');
        heads_by_writer boolean := false;
        quota_by_writer boolean := false;
BEGIN
  -- The writer's own supersede: every row superseded by the writer's operation.
  IF writer IS NOT NULL THEN
    heads_by_writer := NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status IS DISTINCT FROM 'superseded' OR n.superseded_by IS DISTINCT FROM writer);
  END IF;
  IF qwriter IS NOT NULL THEN
    quota_by_writer := CASE WHEN qwriter = writer THEN heads_by_writer
                            ELSE NOT EXISTS (SELECT 1 FROM new_rows n
                                              WHERE n.status IS DISTINCT FROM 'superseded' OR n.superseded_by IS DISTINCT FROM qwriter) END;
  END IF;
  -- 'superseded' is no event status, so such a statement has nothing left to do.
  IF heads_by_writer AND quota_by_writer THEN RETURN NULL; END IF;

  -- Dispatch heads (lr_dispatch_heads_after_update, 0040).
  IF NOT heads_by_writer THEN
    -- Claimed (now in flight): the target has no claimable head; the claim holds its row lock.
    -- Every other change recomputes its targets' heads from the table.
    DELETE FROM dispatch_heads d USING new_rows n
     WHERE n.status = 'sending' AND d.tenant_id = n.tenant_id AND d.target_id = n.target_id;
    SELECT array_agg(c.tenant_id), array_agg(c.target_id) INTO tn, tg
      FROM (SELECT DISTINCT p.tenant_id, p.target_id
              FROM (SELECT u.tenant_id, max(u.target_id) AS target_id,
                           max(u.status) FILTER (WHERE u.old) AS os, max(u.status) FILTER (WHERE NOT u.old) AS ns,
                           max(u.next_attempt_at) FILTER (WHERE u.old) AS onext, max(u.next_attempt_at) FILTER (WHERE NOT u.old) AS nnext,
                           max(u.pending_reason) FILTER (WHERE u.old) AS opr, max(u.pending_reason) FILTER (WHERE NOT u.old) AS npr
                      FROM (SELECT o.tenant_id, o.id, o.target_id, o.status, o.next_attempt_at, o.pending_reason, true AS old FROM old_rows o
                            UNION ALL
                            SELECT n.tenant_id, n.id, n.target_id, n.status, n.next_attempt_at, n.pending_reason, false FROM new_rows n) u
                     GROUP BY u.tenant_id, u.id) p
             WHERE p.ns <> 'sending' AND (p.os IN ('queued', 'sending') OR p.ns = 'queued')
               AND (p.os, p.onext, p.opr) IS DISTINCT FROM (p.ns, p.nnext, p.npr)) c;
    IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  END IF;

  -- operation.accepted / failed / unknown / expired (lr_operations_events_stmt, 0034).
  IF EXISTS (SELECT 1 FROM new_rows n WHERE n.status IN ('accepted', 'failed', 'unknown', 'expired')) THEN
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
  END IF;

  -- Quota counters (lr_quota_after_update, 0041).
  IF NOT quota_by_writer THEN
    INSERT INTO push_quota AS q (tenant_id, day, shard, reserved, used)
    SELECT u.tenant_id, u.quota_day, lr_quota_shard(), sum(u.dr), sum(u.du)
      FROM (SELECT n.tenant_id, n.quota_day, (n.status IN ('queued', 'sending'))::int AS dr, (n.status IN ('accepted', 'unknown'))::int AS du
              FROM new_rows n
             WHERE n.consumes_quota AND n.quota_day IS NOT NULL AND n.status IN ('queued', 'sending', 'accepted', 'unknown')
            UNION ALL
            SELECT o.tenant_id, o.quota_day, -(o.status IN ('queued', 'sending'))::int, -(o.status IN ('accepted', 'unknown'))::int
              FROM old_rows o
             WHERE o.consumes_quota AND o.quota_day IS NOT NULL AND o.status IN ('queued', 'sending', 'accepted', 'unknown')
               AND (qwriter IS NULL
                    OR NOT EXISTS (SELECT 1 FROM new_rows n
                                    WHERE n.tenant_id = o.tenant_id AND n.id = o.id AND n.status = 'superseded' AND n.superseded_by = qwriter))) u
     GROUP BY u.tenant_id, u.quota_day
    HAVING sum(u.dr) <> 0 OR sum(u.du) <> 0
    ON CONFLICT (tenant_id, day, shard) DO UPDATE
       SET reserved = q.reserved + EXCLUDED.reserved, used = q.used + EXCLUDED.used;
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER dispatch_heads_insert ON operations;
DROP TRIGGER operations_quota_insert ON operations;
DROP TRIGGER dispatch_heads_update ON operations;
DROP TRIGGER operations_events ON operations;
DROP TRIGGER operations_quota_update ON operations;
DROP FUNCTION lr_quota_after_insert();
DROP FUNCTION lr_quota_after_update();
DROP FUNCTION lr_dispatch_heads_after_update();
DROP FUNCTION lr_operations_events_stmt();
CREATE TRIGGER operations_after_insert AFTER INSERT ON operations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_operations_after_insert();
CREATE TRIGGER operations_after_update AFTER UPDATE ON operations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lr_operations_after_update();
