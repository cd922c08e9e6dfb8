-- 0040: a write refreshes its own target's dispatch head (docs/write-path.md "Heads refreshed by
-- the writer").
--
-- An update or an end inserts its operation and supersedes the queued operations it replaces,
-- and each statement's trigger refreshed the target's head: the insert trigger locked the
-- target again and probed its queue, the update trigger grouped the old and new rows and called
-- lr_dispatch_heads_refresh_set, which locked the target once more before it looked the head up.
-- deploy/bench/writes with these triggers disabled (BENCH_WITHOUT_TRIGGERS=heads, diagnosis
-- only): PostgreSQL's CPU per accepted update 1.015 -> 0.720 ms, 29 % of it for one head row.
--
-- The writer already holds its target's row lock (FOR UPDATE) and knows its operation, so it now
-- names that operation in `liverelay.head_by_writer` (SET LOCAL) before it inserts it, and after
-- the supersede refreshes the head with one statement of its own (WritePath.refreshHead: the
-- first queued or sending operation by seq, as lr_dispatch_heads_refresh_set computes it for
-- one target; with a claim at commit the claim settles the head instead). The triggers leave to
-- the writer exactly those rows:
-- - the insert trigger skips the row whose id is the writer's operation (as it skips the row a
--   dispatcher claims at commit, 0027);
-- - the update trigger returns at once when every updated row was superseded by the writer's
--   operation (the writer's supersede statement); any other update, a claim at commit of the
--   writer's operation included, is handled as before.
-- With the setting unset (every other writer) both functions behave as before.
--
-- A head that moves to a newer operation keeps its place in its tenant's queue. A head row's
-- `due_at` was its operation's `next_attempt_at`, so every supersede moved the target behind
-- every other due target of its tenant: under a backlog, a target updated more often than the
-- claims reached it was never reached (each update reset its wait). Now, when the new head is
-- due already, the row keeps the earlier of the two times: `due_at` is how long the target has
-- had claimable work. It also leaves `due_at` unchanged on a supersede, so the row's update
-- touches no indexed column and can be HOT (`fillfactor` 70 leaves new pages room for that; pages
-- written before keep theirs until a rewrite, and HOT pruning makes room as they churn).
-- A head that is not due yet (a retry's backoff) takes its own time, as before.
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[]; claiming text := NULLIF(current_setting('liverelay.claim_at_commit', true), '');
        writer text := NULLIF(current_setting('liverelay.head_by_writer', true), '');
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r
     WHERE r.status = 'queued' AND r.id IS DISTINCT FROM claiming AND r.id IS DISTINCT FROM writer;
    IF tn IS NULL THEN RETURN NULL; END IF;
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
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE tn text[]; tg text[]; writer text := NULLIF(current_setting('liverelay.head_by_writer', true), '');
BEGIN
  -- The writer's own supersede: it refreshes its target's head itself, after this statement.
  IF writer IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status IS DISTINCT FROM 'superseded' OR n.superseded_by IS DISTINCT FROM writer) THEN
    RETURN NULL;
  END IF;
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
  RETURN NULL;
END $$;

-- The place-keeping `due_at` (see the top): the time a head row that held `held` is due at when
-- its head's `next_attempt_at` is `next`. One definition for this refresh and the writer's
-- (WritePath.refreshHead); a single-expression SQL function, so the planner inlines it.
CREATE FUNCTION lr_head_due_at(held timestamptz, next timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT CASE WHEN next <= now() THEN LEAST(held, next) ELSE next END $$;

-- The set-based refresh every other writer uses, with that `due_at`.
CREATE OR REPLACE FUNCTION lr_dispatch_heads_refresh_set(p_tenants text[], p_targets text[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  IF cardinality(p_tenants) = 0 THEN RETURN; END IF;
  -- The writers' lock order (target, then its operations); sorted so two refreshes cannot deadlock.
  PERFORM 1 FROM targets t
    JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(p_tenants, p_targets) AS u(tenant_id, target_id)) x
      ON t.tenant_id = x.tenant_id AND t.id = x.target_id
   ORDER BY t.tenant_id, t.id
     FOR NO KEY UPDATE OF t;
  -- A fresh snapshot (next statement): the queues as every locker left them.
  WITH x AS (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(p_tenants, p_targets) AS u(tenant_id, target_id)),
  h AS (
    SELECT x.tenant_id, x.target_id, o.id, o.status, o.next_attempt_at, o.pending_reason
      FROM x LEFT JOIN LATERAL (
           SELECT o.id, o.status, o.next_attempt_at, o.pending_reason FROM operations o
            WHERE o.tenant_id = x.tenant_id AND o.target_id = x.target_id AND o.status IN ('queued', 'sending')
            ORDER BY o.seq LIMIT 1) o ON true
  ), gone AS (
    DELETE FROM dispatch_heads d USING h
     WHERE d.tenant_id = h.tenant_id AND d.target_id = h.target_id
       AND (h.id IS NULL OR h.status <> 'queued' OR COALESCE(h.pending_reason, '') = 'token_pending')
  )
  INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at)
  SELECT h.tenant_id, h.target_id, h.id, h.next_attempt_at FROM h
   WHERE h.id IS NOT NULL AND h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending'
  ON CONFLICT (tenant_id, target_id) DO UPDATE
     SET operation_id = EXCLUDED.operation_id, due_at = lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at)
   WHERE (dispatch_heads.operation_id, dispatch_heads.due_at)
         IS DISTINCT FROM (EXCLUDED.operation_id, lr_head_due_at(dispatch_heads.due_at, EXCLUDED.due_at));
END $$;

ALTER TABLE dispatch_heads SET (fillfactor = 70);
