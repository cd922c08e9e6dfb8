-- 0007: fair claims (docs/delivery.md "Claims").
--
-- dispatch_heads holds one row per target whose next operation can be claimed: the head of the
-- target's queue (its lowest-seq operation that is queued or sending) when that head is
-- `queued` and not parked as `token_pending`, with the head's due time. A target with a head in
-- flight, a parked head or no work has no row. A claim therefore reads at most one candidate per
-- target, whatever the target's backlog, and reads per tenant through (tenant_id, due_at), so a
-- tenant with a huge backlog contributes no more candidates than any other tenant.
--
-- The rows are kept by statement-level triggers on operations, whatever code path changes an
-- operation (write path, claim, apply, expiry, token triggers of 0005, sweeps). Each refresh
-- locks the target row (FOR NO KEY UPDATE, which every writer of a target's operations already
-- holds or conflicts with) and then reads the queue with a fresh snapshot, so two transactions
-- changing the same target's operations cannot leave a stale or missing row behind.

CREATE TABLE dispatch_heads (
  tenant_id     text COLLATE "C" NOT NULL,
  target_id     text COLLATE "C" NOT NULL,
  operation_id  text COLLATE "C" NOT NULL,
  due_at        timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, target_id)
);
-- The claim: tenants with due heads (skip scan over tenant_id), then each tenant's earliest heads.
CREATE INDEX dispatch_heads_due ON dispatch_heads (tenant_id, due_at);

-- The head of a target's queue in one index probe, however many finished operations it has.
CREATE INDEX operations_live ON operations (tenant_id, target_id, seq) WHERE status IN ('queued', 'sending');

ALTER TABLE dispatch_heads ENABLE ROW LEVEL SECURITY;
ALTER TABLE dispatch_heads FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON dispatch_heads USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id));

CREATE FUNCTION lr_dispatch_head_refresh(p_tenant text, p_target text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE h record;
BEGIN
  PERFORM 1 FROM targets WHERE tenant_id = p_tenant AND id = p_target FOR NO KEY UPDATE;
  SELECT o.id, o.status, o.next_attempt_at, o.pending_reason INTO h
    FROM operations o
   WHERE o.tenant_id = p_tenant AND o.target_id = p_target AND o.status IN ('queued', 'sending')
   ORDER BY o.seq LIMIT 1;
  IF NOT FOUND OR h.status <> 'queued' OR COALESCE(h.pending_reason, '') = 'token_pending' THEN
    DELETE FROM dispatch_heads WHERE tenant_id = p_tenant AND target_id = p_target;
  ELSE
    INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at) VALUES (p_tenant, p_target, h.id, h.next_attempt_at)
    ON CONFLICT (tenant_id, target_id) DO UPDATE SET operation_id = EXCLUDED.operation_id, due_at = EXCLUDED.due_at
     WHERE (dispatch_heads.operation_id, dispatch_heads.due_at) IS DISTINCT FROM (EXCLUDED.operation_id, EXCLUDED.due_at);
  END IF;
END $$;

CREATE FUNCTION lr_dispatch_heads_after_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT DISTINCT n.tenant_id, n.target_id FROM new_rows n WHERE n.status IN ('queued', 'sending') ORDER BY 1, 2 LOOP
    PERFORM lr_dispatch_head_refresh(r.tenant_id, r.target_id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE FUNCTION lr_dispatch_heads_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT DISTINCT n.tenant_id, n.target_id
             FROM new_rows n JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.id = n.id
            WHERE (o.status IN ('queued', 'sending') OR n.status IN ('queued', 'sending'))
              AND (o.status, o.next_attempt_at, o.pending_reason) IS DISTINCT FROM (n.status, n.next_attempt_at, n.pending_reason)
            ORDER BY 1, 2 LOOP
    PERFORM lr_dispatch_head_refresh(r.tenant_id, r.target_id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE FUNCTION lr_dispatch_heads_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT DISTINCT o.tenant_id, o.target_id FROM old_rows o WHERE o.status IN ('queued', 'sending') ORDER BY 1, 2 LOOP
    PERFORM lr_dispatch_head_refresh(r.tenant_id, r.target_id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE TRIGGER dispatch_heads_insert AFTER INSERT ON operations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_dispatch_heads_after_insert();
CREATE TRIGGER dispatch_heads_update AFTER UPDATE ON operations REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_dispatch_heads_after_update();
CREATE TRIGGER dispatch_heads_delete AFTER DELETE ON operations REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_dispatch_heads_after_delete();

-- Existing queues (the migration runs in the system scope for this statement only).
SELECT set_config('app.scope', 'system', true);
INSERT INTO dispatch_heads (tenant_id, target_id, operation_id, due_at)
SELECT h.tenant_id, h.target_id, h.id, h.next_attempt_at
  FROM (SELECT DISTINCT ON (tenant_id, target_id) tenant_id, target_id, id, status, next_attempt_at, pending_reason
          FROM operations WHERE status IN ('queued', 'sending') ORDER BY tenant_id, target_id, seq) h
 WHERE h.status = 'queued' AND COALESCE(h.pending_reason, '') <> 'token_pending';
SELECT set_config('app.scope', '', true);
