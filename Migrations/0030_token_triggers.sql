-- Token registration racing a claim that parks (docs/delivery.md "Claims"): a claim locks the
-- operation and its target, reads the installation's FCM token and the start target's
-- push-to-start token without locking them, and parks the operation when the token is missing.
-- A token registered meanwhile ran its un-park UPDATE with a snapshot in which the operation
-- was not parked yet (the claim had not committed), so nothing was un-parked, and the
-- operation waited, parked with a valid token, for the un-park sweep. Now the trigger first
-- locks the live targets concerned (the claim's lock order: target first, sorted), which waits
-- for such a claim to commit, and un-parks in the next statement, with a fresh snapshot. (The
-- activity's own update token is a column of `targets`: its UPDATE already waits for the
-- claim's lock on the row.)
-- All three token triggers now wake the dispatchers (NOTIFY) only when they un-parked an
-- operation: every activity registers its update token once, and each bare wake-up costs every
-- dispatcher a fair claim that finds nothing (400 of them for 400 registrations in
-- deploy/bench/dispatch).
CREATE OR REPLACE FUNCTION lr_dispatch_target_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_token IS NOT NULL AND NEW.token_status = 'registered'
     AND (OLD.push_token IS DISTINCT FROM NEW.push_token OR OLD.token_status IS DISTINCT FROM NEW.token_status) THEN
    UPDATE operations SET pending_reason = NULL, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND target_id = NEW.id AND status = 'queued' AND pending_reason = 'token_pending';
    IF FOUND THEN PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id); END IF;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_start_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_to_start_token IS NOT NULL AND OLD.push_to_start_token IS DISTINCT FROM NEW.push_to_start_token THEN
    PERFORM 1 FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id AND t.status NOT IN ('ended', 'creation_failed')
     ORDER BY t.tenant_id, t.id FOR NO KEY UPDATE OF t;
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
      FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id
       AND o.tenant_id = t.tenant_id AND o.target_id = t.id AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    IF FOUND THEN PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id); END IF;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_fcm_token() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE unparked boolean;
BEGIN
  IF NEW.fcm_token IS NOT NULL AND OLD.fcm_token IS DISTINCT FROM NEW.fcm_token THEN
    PERFORM 1 FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id AND t.status NOT IN ('ended', 'creation_failed')
     ORDER BY t.tenant_id, t.id FOR NO KEY UPDATE OF t;
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
      FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id
       AND o.tenant_id = t.tenant_id AND o.target_id = t.id AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    unparked := FOUND;
    -- Android targets are token-registered exactly while the installation has an FCM token (SPEC §8).
    UPDATE targets SET token_status = 'registered',
           status = CASE WHEN status = 'token_pending' THEN 'ready' ELSE status END, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android'
       AND status NOT IN ('ended', 'creation_failed') AND token_status = 'pending';
    UPDATE start_targets SET status = 'ready', updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android' AND status = 'pending';
    IF unparked THEN PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id); END IF;
  END IF;
  RETURN NEW;
END $$;
