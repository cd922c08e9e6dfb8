-- Token triggers wake the dispatchers (NOTIFY) only when there is something to claim: an
-- operation they un-parked, or a dispatch head of a target they concern (a claim may have
-- skipped it while this transaction held the target's row). Every activity registers its update
-- token once, and each bare wake-up costs every dispatcher a fair claim that finds nothing (400
-- of them for 400 registrations in deploy/bench/dispatch's live phase).
CREATE OR REPLACE FUNCTION lr_dispatch_target_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_token IS NOT NULL AND NEW.token_status = 'registered'
     AND (OLD.push_token IS DISTINCT FROM NEW.push_token OR OLD.token_status IS DISTINCT FROM NEW.token_status) THEN
    UPDATE operations SET pending_reason = NULL, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND target_id = NEW.id AND status = 'queued' AND pending_reason = 'token_pending';
    IF FOUND OR EXISTS (SELECT 1 FROM dispatch_heads h WHERE h.tenant_id = NEW.tenant_id AND h.target_id = NEW.id) THEN
      PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
    END IF;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_start_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_to_start_token IS NOT NULL AND OLD.push_to_start_token IS DISTINCT FROM NEW.push_to_start_token THEN
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
      FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id
       AND o.tenant_id = t.tenant_id AND o.target_id = t.id AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    IF FOUND OR EXISTS (SELECT 1 FROM targets t JOIN dispatch_heads h ON h.tenant_id = t.tenant_id AND h.target_id = t.id
                         WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id) THEN
      PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
    END IF;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION lr_dispatch_fcm_token() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE unparked boolean;
BEGIN
  IF NEW.fcm_token IS NOT NULL AND OLD.fcm_token IS DISTINCT FROM NEW.fcm_token THEN
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
    IF unparked OR EXISTS (SELECT 1 FROM targets t JOIN dispatch_heads h ON h.tenant_id = t.tenant_id AND h.target_id = t.id
                            WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id) THEN
      PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
    END IF;
  END IF;
  RETURN NEW;
END $$;
