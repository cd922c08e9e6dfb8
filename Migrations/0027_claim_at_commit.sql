-- Claims at commit (docs/delivery.md "Claims at commit"): a write whose process runs a dispatcher
-- claims the operation it queues inside its own transaction. Its insert would first refresh the
-- target's dispatch head (lock the target, compute the head, upsert dispatch_heads) and the claim
-- would then delete that head row again: ~0.5 ms of the write for nothing. The write names the
-- operation it is about to claim in the transaction-local setting `liverelay.claim_at_commit`;
-- the insert trigger leaves that operation's target alone. When the claim does not take the
-- operation, the write refreshes the head itself before COMMIT (`CommitClaim.read`), so the
-- head is always right when the transaction commits. Writers that never set the setting
-- (every other path, older binaries) refresh exactly as before (migration 0025).
CREATE OR REPLACE FUNCTION lr_dispatch_heads_after_insert_or_delete() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE tn text[]; tg text[]; claiming text := NULLIF(current_setting('liverelay.claim_at_commit', true), '');
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM new_rows r
     WHERE r.status IN ('queued', 'sending') AND r.id IS DISTINCT FROM claiming;
    IF tn IS NULL THEN RETURN NULL; END IF;
    PERFORM 1 FROM targets t
      JOIN (SELECT DISTINCT u.tenant_id, u.target_id FROM unnest(tn, tg) AS u(tenant_id, target_id)) x
        ON t.tenant_id = x.tenant_id AND t.id = x.target_id
     ORDER BY t.tenant_id, t.id
       FOR NO KEY UPDATE OF t;
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg
      FROM new_rows r
     WHERE r.status IN ('queued', 'sending') AND r.id IS DISTINCT FROM claiming
       AND COALESCE((SELECT o.seq FROM operations o
                      WHERE o.tenant_id = r.tenant_id AND o.target_id = r.target_id AND o.status IN ('queued', 'sending')
                      ORDER BY o.seq LIMIT 1), r.seq) >= r.seq;  -- none found: refresh (always correct)
  ELSE
    SELECT array_agg(r.tenant_id), array_agg(r.target_id) INTO tn, tg FROM old_rows r WHERE r.status IN ('queued', 'sending');
  END IF;
  IF tn IS NOT NULL THEN PERFORM lr_dispatch_heads_refresh_set(tn, tg); END IF;
  RETURN NULL;
END $$;
