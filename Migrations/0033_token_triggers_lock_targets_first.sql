-- 0033: the start-token and FCM-token triggers lock the targets before their operations
-- (docs/delivery.md "Claims": the order every writer takes, target then its queued operations).
--
-- 0030's versions un-parked the operations first (an UPDATE of operations) and, for an FCM
-- token, then updated the installation's Android targets. A write to one of those targets holds
-- the target and then locks its queued operations (a supersede): with the trigger holding the
-- parked operation and waiting for the target, the two deadlocked until PostgreSQL's deadlock
-- check (deadlock_timeout, 1 s) aborted one of them — an API request or a device's token
-- registration. Now the targets with parked operations are locked first, sorted (FOR NO KEY
-- UPDATE, as DispatchStore.unparkSQL does); bodies otherwise as in 0030. Only those targets: the
-- un-park's dispatch-head refresh locked exactly them anyway (after the operations), so the
-- triggers take no row they did not take before, only in the writers' order. (They still run
-- with the installation or start target locked, the reverse of an apply's dead-token effect,
-- target then installation or start target, as before.) The update-token trigger needs no
-- change: it fires inside the UPDATE of its own target row, which holds that row already.
CREATE OR REPLACE FUNCTION lr_dispatch_start_token() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE locked text[];
BEGIN
  IF NEW.push_to_start_token IS NOT NULL AND OLD.push_to_start_token IS DISTINCT FROM NEW.push_to_start_token THEN
    SELECT array_agg(l.id) INTO locked FROM (
      SELECT t.id FROM targets t
       WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id
         AND EXISTS (SELECT 1 FROM operations o WHERE o.tenant_id = t.tenant_id AND o.target_id = t.id
                       AND o.status = 'queued' AND o.pending_reason = 'token_pending')
       ORDER BY t.tenant_id, t.id FOR NO KEY UPDATE OF t) l;
    -- Only the targets locked above: an operation parked after that snapshot is left to the
    -- dispatcher's re-check (`unparkIfTokenReady`), which locks its target first.
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
     WHERE o.tenant_id = NEW.tenant_id AND o.target_id = ANY(locked) AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    IF FOUND OR EXISTS (SELECT 1 FROM targets t JOIN dispatch_heads h ON h.tenant_id = t.tenant_id AND h.target_id = t.id
                         WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id) THEN
      PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
    END IF;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_fcm_token() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE unparked boolean; locked text[];
BEGIN
  IF NEW.fcm_token IS NOT NULL AND OLD.fcm_token IS DISTINCT FROM NEW.fcm_token THEN
    SELECT array_agg(l.id) INTO locked FROM (
      SELECT t.id FROM targets t
       WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id
         AND EXISTS (SELECT 1 FROM operations o WHERE o.tenant_id = t.tenant_id AND o.target_id = t.id
                       AND o.status = 'queued' AND o.pending_reason = 'token_pending')
       ORDER BY t.tenant_id, t.id FOR NO KEY UPDATE OF t) l;
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
     WHERE o.tenant_id = NEW.tenant_id AND o.target_id = ANY(locked) AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    unparked := FOUND;
    -- Android targets are token-registered exactly while the installation has an FCM token (docs/providers.md).
    UPDATE targets SET token_status = 'registered',
           status = CASE WHEN status = 'token_pending' THEN 'ready' ELSE status END, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android'
       AND status NOT IN ('ended', 'creation_failed') AND token_status = 'pending';
    UPDATE start_targets SET status = 'ready', updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android' AND status = 'pending';
    IF unparked OR EXISTS (SELECT 1 FROM targets t JOIN dispatch_heads h ON h.tenant_id = t.tenant_id AND h.target_id = t.id
                            WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id) THEN
      PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
    END IF;
  END IF;
  RETURN NEW;
END $$;
