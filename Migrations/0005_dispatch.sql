-- 0005: dispatcher support (SPEC §5 ordering, §8 delivery, §9 workers).
--
-- Token-pending mechanism: the dispatcher never claims an operation whose token is missing
-- (iOS update/end: targets.push_token registered; iOS start: start_targets.push_to_start_token;
-- Android: installations.fcm_token). Its periodic sweep marks the head operation of such a
-- target `pending_reason = 'token_pending'` (claims skip those rows), and the triggers below
-- un-park them and wake the dispatchers (NOTIFY liverelay_dispatch, delivered at commit) the
-- moment a token is registered, whichever code path registers it. The sweep also un-parks
-- anything whose token is present, so a missed wake-up costs at most one sweep interval.

CREATE FUNCTION lr_dispatch_target_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_token IS NOT NULL AND NEW.token_status = 'registered'
     AND (OLD.push_token IS DISTINCT FROM NEW.push_token OR OLD.token_status IS DISTINCT FROM NEW.token_status) THEN
    UPDATE operations SET pending_reason = NULL, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND target_id = NEW.id AND status = 'queued' AND pending_reason = 'token_pending';
    PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER dispatch_target_token AFTER UPDATE OF push_token, token_status ON targets
  FOR EACH ROW EXECUTE FUNCTION lr_dispatch_target_token();

CREATE FUNCTION lr_dispatch_start_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.push_to_start_token IS NOT NULL AND OLD.push_to_start_token IS DISTINCT FROM NEW.push_to_start_token THEN
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
      FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.start_target_id = NEW.id
       AND o.tenant_id = t.tenant_id AND o.target_id = t.id AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER dispatch_start_token AFTER UPDATE OF push_to_start_token ON start_targets
  FOR EACH ROW EXECUTE FUNCTION lr_dispatch_start_token();

CREATE FUNCTION lr_dispatch_fcm_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fcm_token IS NOT NULL AND OLD.fcm_token IS DISTINCT FROM NEW.fcm_token THEN
    UPDATE operations o SET pending_reason = NULL, updated_at = now()
      FROM targets t
     WHERE t.tenant_id = NEW.tenant_id AND t.installation_id = NEW.id
       AND o.tenant_id = t.tenant_id AND o.target_id = t.id AND o.status = 'queued' AND o.pending_reason = 'token_pending';
    -- Android targets are token-registered exactly while the installation has an FCM token (SPEC §8).
    UPDATE targets SET token_status = 'registered',
           status = CASE WHEN status = 'token_pending' THEN 'ready' ELSE status END, updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android'
       AND status NOT IN ('ended', 'creation_failed') AND token_status = 'pending';
    UPDATE start_targets SET status = 'ready', updated_at = now()
     WHERE tenant_id = NEW.tenant_id AND installation_id = NEW.id AND NEW.platform = 'android' AND status = 'pending';
    PERFORM pg_notify('liverelay_dispatch', NEW.tenant_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER dispatch_fcm_token AFTER UPDATE OF fcm_token ON installations
  FOR EACH ROW EXECUTE FUNCTION lr_dispatch_fcm_token();

-- Lifetime maintenance (SPEC §5 "Activity lifetime"): live targets by start time.
CREATE INDEX targets_live_started ON targets (started_at) WHERE status NOT IN ('ended', 'creation_failed');
-- Expiry sweep: queued operations with an expires_at.
CREATE INDEX operations_queued_expiry ON operations (expires_at) WHERE status = 'queued' AND expires_at IS NOT NULL;
