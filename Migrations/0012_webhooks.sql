-- 0012: events and webhooks (docs/webhooks.md). Same conventions as 0001: tenant_id first in every
-- key, forced RLS.
--
-- An event row is inserted in the same transaction as the change it reports. For the state
-- changes of operations, targets, start targets and installations this is done by AFTER
-- triggers on their `status` column (so every code path that changes a status — writes, the
-- dispatcher's apply, device endpoints, maintenance — reports it, and a rolled-back change
-- leaves no event). Each trigger fires only on the exact transition its event type names
-- (WHEN clause), so it costs nothing on every other update. Other events (quota.exhausted,
-- webhook.test) are inserted by the application (EventStore.record). An AFTER INSERT trigger on
-- events queues one delivery per enabled, subscribed endpoint of the same tenant, again in the
-- same transaction: nothing is lost between "the event exists" and "its deliveries exist".

-- Output times as the API shows them: UTC, milliseconds, `Z` (to_char truncates to ms).
CREATE FUNCTION lr_ts(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- A new time-ordered id `<prefix>_<26 chars>`: 48-bit Unix milliseconds then 80 random bits
-- (UUIDv7 layout), lowercase Crockford base32 of the 128 bits with two leading zero bits — the
-- same format as LiveRelayCore's Identifier.make.
CREATE FUNCTION lr_new_id(prefix text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
  r bytea := decode(replace(gen_random_uuid()::text, '-', ''), 'hex');
  b bytea := r;
  bits bit(130);
  alphabet text := '0123456789abcdefghjkmnpqrstvwxyz';
  out text := '';
  i int;
BEGIN
  FOR i IN 0..5 LOOP b := set_byte(b, i, ((ms >> (8 * (5 - i))) & 255)::int); END LOOP;
  b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);   -- version 7
  b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);   -- RFC 4122 variant
  bits := B'00' || ('x' || encode(b, 'hex'))::bit(128);
  FOR i IN 0..25 LOOP out := out || substr(alphabet, substring(bits FROM i * 5 + 1 FOR 5)::int + 1, 1); END LOOP;
  RETURN prefix || '_' || out;
END $$;

CREATE TABLE webhook_endpoints (
  tenant_id        text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id               text COLLATE "C" NOT NULL,
  url              text NOT NULL,
  events           text[] NOT NULL,
  description      text NOT NULL DEFAULT '',
  status           text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
  disabled_reason  text,
  failing_since    timestamptz,          -- first failed attempt since the last success
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);

-- Signing secrets, AES-256-GCM-sealed under the key-encryption key (the plaintext is needed to
-- sign). A secret signs while expires_at is NULL or in the future.
CREATE TABLE webhook_secrets (
  tenant_id      text COLLATE "C" NOT NULL,
  endpoint_id    text COLLATE "C" NOT NULL,
  id             text COLLATE "C" NOT NULL,
  secret_sealed  bytea NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  expires_at     timestamptz,
  PRIMARY KEY (tenant_id, endpoint_id, id),
  FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE events (
  tenant_id   text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id          text COLLATE "C" NOT NULL,
  type        text NOT NULL,
  target_id   text COLLATE "C",
  channel_id  text COLLATE "C",
  dedupe_key  text,                      -- at most one event per (tenant, dedupe_key), e.g. quota.exhausted:<day>
  data        jsonb NOT NULL,            -- {"object": <the object as the API shows it>}
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX events_type ON events (tenant_id, type, id);
CREATE INDEX events_target ON events (tenant_id, target_id, id) WHERE target_id IS NOT NULL;
CREATE INDEX events_channel ON events (tenant_id, channel_id, id) WHERE channel_id IS NOT NULL;
CREATE INDEX events_created ON events (created_at);
CREATE UNIQUE INDEX events_dedupe ON events (tenant_id, dedupe_key) WHERE dedupe_key IS NOT NULL;

-- One row per (endpoint, event): the delivery queue and its outcome.
CREATE TABLE webhook_deliveries (
  tenant_id         text COLLATE "C" NOT NULL,
  endpoint_id       text COLLATE "C" NOT NULL,
  event_id          text COLLATE "C" NOT NULL,
  event_type        text NOT NULL,
  status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts          int NOT NULL DEFAULT 0,
  next_attempt_at   timestamptz NOT NULL DEFAULT now(),
  lease_owner       text,
  lease_expires_at  timestamptz,
  event_created_at  timestamptz NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  finished_at       timestamptz,
  PRIMARY KEY (tenant_id, endpoint_id, event_id),
  FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id) ON DELETE CASCADE,
  FOREIGN KEY (tenant_id, event_id) REFERENCES events (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (tenant_id, event_id);

-- The delivery log: one row per attempt.
CREATE TABLE webhook_attempts (
  tenant_id     text COLLATE "C" NOT NULL,
  endpoint_id   text COLLATE "C" NOT NULL,
  id            bigint GENERATED ALWAYS AS IDENTITY,
  event_id      text COLLATE "C" NOT NULL,
  event_type    text NOT NULL,
  attempt       int NOT NULL,
  status_code   int,
  error         text,
  duration_ms   int NOT NULL,
  delivered_at  timestamptz NOT NULL,    -- when the attempt was made
  PRIMARY KEY (tenant_id, endpoint_id, id),
  FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_attempts_time ON webhook_attempts (delivered_at);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['webhook_endpoints', 'webhook_secrets', 'events', 'webhook_deliveries', 'webhook_attempts'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;

-- Inserts one event (a duplicate dedupe_key is skipped). Used by the triggers below and by
-- EventStore.record.
CREATE FUNCTION lr_event_insert(p_tenant text, p_type text, p_target text, p_channel text, p_object jsonb,
                                p_dedupe text DEFAULT NULL) RETURNS void
LANGUAGE sql VOLATILE AS $$
  INSERT INTO events (tenant_id, id, type, target_id, channel_id, dedupe_key, data)
  VALUES (p_tenant, lr_new_id('evt'), p_type, p_target, p_channel, p_dedupe, jsonb_build_object('object', p_object))
  ON CONFLICT DO NOTHING
$$;

-- Queues the deliveries of a new event (webhook.test is queued by its endpoint only).
CREATE FUNCTION lr_events_fanout() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.type <> 'webhook.test' THEN
    INSERT INTO webhook_deliveries (tenant_id, endpoint_id, event_id, event_type, event_created_at)
    SELECT NEW.tenant_id, e.id, NEW.id, NEW.type, NEW.created_at
      FROM webhook_endpoints e
     WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
       AND (e.events @> ARRAY[NEW.type] OR e.events @> ARRAY['*']);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER events_fanout AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION lr_events_fanout();

-- The API objects (LiveRelayAPI Encode.operation / Encode.target / DeviceHandlers.startTarget /
-- Encode.installation), never business state nor tokens. Keep in step with those encoders
-- (WebhookEventTypeTests compares them).
CREATE FUNCTION lr_operation_object(o operations) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', o.id, 'object', 'operation', 'target_id', o.target_id, 'kind', o.kind, 'status', o.status,
    'pending_reason', o.pending_reason, 'revision', o.revision, 'superseded_by', o.superseded_by, 'apns_id', o.apns_id,
    'failure', o.failure, 'consumes_quota', o.consumes_quota, 'has_alert', o.alert IS NOT NULL, 'priority', o.priority,
    'expires_at', lr_ts(o.expires_at), 'created_at', lr_ts(o.created_at), 'updated_at', lr_ts(o.updated_at),
    'accepted_at', lr_ts(o.accepted_at))
$$;

CREATE FUNCTION lr_target_object(t targets) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', t.id, 'object', 'target', 'status', t.status, 'end_reason', t.end_reason, 'revision', t.revision,
    'token_status', t.token_status, 'origin', t.origin, 'installation_id', t.installation_id,
    'start_target_id', t.start_target_id, 'activity_type', t.activity_type, 'template_version', t.template_version,
    'business_key', t.business_key, 'business_generation', t.business_generation, 'stale_at', lr_ts(t.stale_at),
    'relevance_score', t.relevance_score,
    'last_render_report', CASE WHEN jsonb_typeof(t.last_render_report) = 'object' AND jsonb_typeof(t.last_render_report -> 'revision') = 'number'
                               THEN t.last_render_report || jsonb_build_object('stale', (t.last_render_report ->> 'revision')::numeric < t.revision)
                               ELSE t.last_render_report END,
    'created_at', lr_ts(t.created_at), 'updated_at', lr_ts(t.updated_at), 'started_at', lr_ts(t.started_at),
    'ended_at', lr_ts(t.ended_at))
$$;

CREATE FUNCTION lr_start_target_object(s start_targets) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', s.id, 'object', 'start_target', 'start_target_id', s.id, 'installation_id', s.installation_id,
    'binding_id', s.binding_id, 'activity_type', s.activity_type, 'template_version', s.current_template_version,
    'status', s.status,
    'platform', (SELECT i.platform FROM installations i WHERE i.tenant_id = s.tenant_id AND i.id = s.installation_id),
    'push_to_start_token_registered', s.push_to_start_token IS NOT NULL,
    'push_to_start_token_fingerprint', CASE WHEN s.push_to_start_token IS NULL THEN NULL
                                            ELSE 'sha256:' || left(encode(sha256(convert_to(s.push_to_start_token, 'UTF8')), 'hex'), 16) END,
    'created_at', lr_ts(s.created_at), 'updated_at', lr_ts(s.updated_at))
$$;

CREATE FUNCTION lr_installation_object(i installations) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', i.id, 'installation_id', i.id, 'object', 'installation', 'app_id', i.app_id, 'platform', i.platform,
    'environment', i.environment, 'install_id', i.install_id, 'fcm_token_registered', i.fcm_token IS NOT NULL,
    'status', i.status, 'created_at', lr_ts(i.created_at), 'retired_at', lr_ts(i.retired_at))
$$;

-- operation.accepted / failed / unknown / expired: the operation reached that status.
CREATE FUNCTION lr_operations_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM lr_event_insert(NEW.tenant_id, 'operation.' || NEW.status, NEW.target_id, NULL, lr_operation_object(NEW));
  RETURN NULL;
END $$;
CREATE TRIGGER operations_event AFTER UPDATE OF status ON operations FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('accepted', 'failed', 'unknown', 'expired'))
  EXECUTE FUNCTION lr_operations_event();

-- target.ready / target.ended: the target became ready / ended (end_reason in the object).
CREATE FUNCTION lr_targets_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM lr_event_insert(NEW.tenant_id, 'target.' || NEW.status, NEW.id, NULL, lr_target_object(NEW));
  RETURN NULL;
END $$;
CREATE TRIGGER targets_event_update AFTER UPDATE OF status ON targets FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('ready', 'ended'))
  EXECUTE FUNCTION lr_targets_event();
CREATE TRIGGER targets_event_insert AFTER INSERT ON targets FOR EACH ROW
  WHEN (NEW.status IN ('ready', 'ended'))
  EXECUTE FUNCTION lr_targets_event();

-- start_target.ready: became ready; start_target.pending: fell from ready back to pending (its
-- push-to-start token — or an Android installation's FCM token — is dead or gone).
CREATE FUNCTION lr_start_targets_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM lr_event_insert(NEW.tenant_id, 'start_target.' || NEW.status, NULL, NULL, lr_start_target_object(NEW));
  RETURN NULL;
END $$;
CREATE TRIGGER start_targets_event_update AFTER UPDATE OF status ON start_targets FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND (NEW.status = 'ready' OR (OLD.status = 'ready' AND NEW.status = 'pending')))
  EXECUTE FUNCTION lr_start_targets_event();
CREATE TRIGGER start_targets_event_insert AFTER INSERT ON start_targets FOR EACH ROW
  WHEN (NEW.status = 'ready')
  EXECUTE FUNCTION lr_start_targets_event();

-- installation.retired.
CREATE FUNCTION lr_installations_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM lr_event_insert(NEW.tenant_id, 'installation.retired', NULL, NULL, lr_installation_object(NEW));
  RETURN NULL;
END $$;
CREATE TRIGGER installations_event AFTER UPDATE OF status ON installations FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'retired')
  EXECUTE FUNCTION lr_installations_event();
