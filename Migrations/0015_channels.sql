-- 0015: channels — one write, many activities (docs/channels.md). Same conventions as 0001:
-- tenant_id first in every key, forced RLS.
--
-- A channel write commits ONE channel_operations row (never a row per member). Members are
-- targets with channel_id set and delivery `broadcast` (iOS 18+, served by one APNs broadcast
-- per write) or `fanout` (every other member: per-target operations inserted later by the
-- dispatcher's fan-out expander, which walks the members in keyset order; the cursor is kept on
-- the channel operation being expanded). targets.channel_seq is the newest channel operation (its seq)
-- queued to that member, so the expander never queues an older channel write after a newer one.
-- Member counts are kept on the channel row by statement-level triggers on targets, so reading
-- them at write time (the quota check: 1 + fan-out members) costs the same for 10 or 100,000
-- members.

CREATE TABLE channels (
  tenant_id          text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id                 text COLLATE "C" NOT NULL,
  app_id             text NOT NULL,
  environment        text NOT NULL CHECK (environment IN ('sandbox', 'production')),
  activity_type      text NOT NULL,
  attributes_type    text NOT NULL,
  schema             jsonb,
  storage_policy     text NOT NULL DEFAULT 'none' CHECK (storage_policy IN ('none', 'most_recent')),
  label              text NOT NULL DEFAULT '',
  apns_channel_id    text NOT NULL,
  status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ending', 'ended')),
  end_reason         text CHECK (end_reason IN ('sender', 'channel_invalid')),
  revision           bigint NOT NULL DEFAULT 0,
  state              jsonb,
  stale_at           timestamptz,
  relevance_score    double precision,
  op_seq             bigint NOT NULL DEFAULT 0,     -- last channel operation sequence number
  last_timestamp     bigint NOT NULL DEFAULT 0,     -- last broadcast `timestamp` (strictly increasing per channel)
  members_broadcast  bigint NOT NULL DEFAULT 0,     -- live members served by the broadcast
  members_fanout     bigint NOT NULL DEFAULT 0,     -- live members served by fan-out
  members_ended      bigint NOT NULL DEFAULT 0,     -- members ended or failed to start
  apns_deleted_at    timestamptz,
  created_by_key_id  text COLLATE "C",
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  ended_at           timestamptz,
  PRIMARY KEY (tenant_id, id)
);
-- CHANNEL_LIMIT: active channels per (app, environment).
CREATE INDEX channels_active ON channels (tenant_id, app_id, environment) WHERE status = 'active';
-- The finaliser: channels whose end is in progress.
CREATE INDEX channels_ending ON channels (updated_at) WHERE status = 'ending';

CREATE TABLE channel_operations (
  tenant_id           text COLLATE "C" NOT NULL,
  id                  text COLLATE "C" NOT NULL,
  channel_id          text COLLATE "C" NOT NULL,
  seq                 bigint NOT NULL,
  kind                text NOT NULL CHECK (kind IN ('update', 'end')),
  revision            bigint NOT NULL,
  has_state           boolean NOT NULL,
  state               jsonb,                 -- the channel's full committed snapshot at this write
  alert               jsonb,
  stale_at            timestamptz,
  relevance_score     double precision,
  priority            int NOT NULL DEFAULT 10 CHECK (priority IN (1, 5, 10)),
  expires_at          timestamptz,
  dismiss_at          timestamptz,
  superseded_by       text COLLATE "C",
  -- the APNs broadcast of this write
  broadcast_status    text CHECK (broadcast_status IN ('queued', 'sending', 'accepted', 'failed', 'superseded', 'expired', 'cancelled')),
  broadcast_attempts  int NOT NULL DEFAULT 0,
  broadcast_next_at   timestamptz NOT NULL DEFAULT now(),
  broadcast_lease_owner text,
  broadcast_lease_expires_at timestamptz,
  broadcast_timestamp bigint,
  apns_request_id     text,
  apns_unique_id      text,
  broadcast_failure   jsonb,
  -- fan-out progress: `pending` until the expander walked every fan-out member (keyset cursor)
  fanout_state        text NOT NULL DEFAULT 'pending' CHECK (fanout_state IN ('pending', 'done')),
  fanout_cursor       text COLLATE "C",
  fanout_done_at      timestamptz,
  consumes_quota      boolean NOT NULL,
  quota_day           date,
  created_by_key_id   text COLLATE "C",
  idempotency_key     text,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, channel_id, seq),
  FOREIGN KEY (tenant_id, channel_id) REFERENCES channels (tenant_id, id)
);
CREATE INDEX channel_operations_channel ON channel_operations (tenant_id, channel_id, id);
CREATE INDEX channel_operations_fanout ON channel_operations (tenant_id, channel_id, seq) WHERE fanout_state = 'pending';
CREATE INDEX channel_operations_broadcast ON channel_operations (broadcast_next_at) WHERE broadcast_status = 'queued';
CREATE INDEX channel_operations_broadcast_sending ON channel_operations (broadcast_lease_expires_at) WHERE broadcast_status = 'sending';

ALTER TABLE targets ADD COLUMN channel_id text COLLATE "C";
ALTER TABLE targets ADD COLUMN delivery text CHECK (delivery IN ('broadcast', 'fanout'));
ALTER TABLE targets ADD COLUMN channel_seq bigint NOT NULL DEFAULT 0;  -- seq of the newest channel operation queued to this member
ALTER TABLE targets ADD CONSTRAINT targets_channel_fk FOREIGN KEY (tenant_id, channel_id) REFERENCES channels (tenant_id, id);
ALTER TABLE targets ADD CONSTRAINT targets_channel_delivery CHECK ((channel_id IS NULL) = (delivery IS NULL));
-- Members of a channel in keyset order (the members list; the expander's walk over live fan-out members).
CREATE INDEX targets_channel ON targets (tenant_id, channel_id, id) WHERE channel_id IS NOT NULL;
CREATE INDEX targets_channel_fanout ON targets (tenant_id, channel_id, id)
  WHERE channel_id IS NOT NULL AND delivery = 'fanout' AND status NOT IN ('ended', 'creation_failed');

ALTER TABLE operations ADD COLUMN channel_operation_id text COLLATE "C";
CREATE INDEX operations_channel_operation ON operations (tenant_id, channel_operation_id, status) WHERE channel_operation_id IS NOT NULL;

-- Member counters: bucket of a member row = ended (terminal status) or its delivery.
CREATE FUNCTION lr_channel_bucket(status text, delivery text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN status IN ('ended', 'creation_failed') THEN 'ended' ELSE delivery END
$$;

CREATE FUNCTION lr_channel_members_apply(p_tenant text[], p_channel text[], p_bucket text[], p_delta bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- Lock the channels in key order first (concurrent appliers touching several channels never deadlock).
  PERFORM 1 FROM channels c JOIN (SELECT DISTINCT t, ch FROM unnest(p_tenant, p_channel) AS x(t, ch)) k
      ON c.tenant_id = k.t AND c.id = k.ch ORDER BY c.tenant_id, c.id FOR NO KEY UPDATE OF c;
  UPDATE channels c SET members_broadcast = c.members_broadcast + d.b, members_fanout = c.members_fanout + d.f,
         members_ended = c.members_ended + d.e
    FROM (SELECT t, ch, sum(CASE WHEN bucket = 'broadcast' THEN delta ELSE 0 END) AS b,
                 sum(CASE WHEN bucket = 'fanout' THEN delta ELSE 0 END) AS f,
                 sum(CASE WHEN bucket = 'ended' THEN delta ELSE 0 END) AS e
            FROM unnest(p_tenant, p_channel, p_bucket, p_delta) AS x(t, ch, bucket, delta) GROUP BY t, ch) d
   WHERE c.tenant_id = d.t AND c.id = d.ch AND (d.b <> 0 OR d.f <> 0 OR d.e <> 0);
END $$;

CREATE FUNCTION lr_channel_members_after_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE a record;
BEGIN
  SELECT array_agg(tenant_id) AS t, array_agg(channel_id) AS ch, array_agg(lr_channel_bucket(status, delivery)) AS b,
         array_agg(1::bigint) AS d INTO a
    FROM new_rows WHERE channel_id IS NOT NULL;
  IF a.t IS NOT NULL THEN PERFORM lr_channel_members_apply(a.t, a.ch, a.b, a.d); END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION lr_channel_members_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE a record;
BEGIN
  SELECT array_agg(x.t) AS t, array_agg(x.ch) AS ch, array_agg(x.b) AS b, array_agg(x.d) AS d INTO a
    FROM (SELECT n.tenant_id AS t, n.channel_id AS ch, lr_channel_bucket(n.status, n.delivery) AS b, 1::bigint AS d
            FROM old_rows o JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
           WHERE n.channel_id IS NOT NULL AND lr_channel_bucket(o.status, o.delivery) IS DISTINCT FROM lr_channel_bucket(n.status, n.delivery)
          UNION ALL
          SELECT o.tenant_id, o.channel_id, lr_channel_bucket(o.status, o.delivery), -1::bigint
            FROM old_rows o JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
           WHERE o.channel_id IS NOT NULL AND lr_channel_bucket(o.status, o.delivery) IS DISTINCT FROM lr_channel_bucket(n.status, n.delivery)) x;
  IF a.t IS NOT NULL THEN PERFORM lr_channel_members_apply(a.t, a.ch, a.b, a.d); END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER targets_channel_members_insert AFTER INSERT ON targets REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_channel_members_after_insert();
CREATE TRIGGER targets_channel_members_update AFTER UPDATE ON targets REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION lr_channel_members_after_update();

-- channel.ended events (docs/webhooks.md), in the transaction that ends the channel.
CREATE FUNCTION lr_event_channel_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events (tenant_id, id, type, channel_id, data)
  VALUES (NEW.tenant_id, lr_new_id('evt'), 'channel.ended', NEW.id, jsonb_build_object('object', jsonb_build_object(
    'id', NEW.id, 'object', 'channel', 'app_id', NEW.app_id, 'environment', NEW.environment,
    'activity_type', NEW.activity_type, 'attributes_type', NEW.attributes_type, 'storage_policy', NEW.storage_policy,
    'apns_channel_id', NEW.apns_channel_id, 'status', NEW.status, 'end_reason', NEW.end_reason, 'revision', NEW.revision,
    'state_present', NEW.state IS NOT NULL,
    'members', jsonb_build_object('broadcast', NEW.members_broadcast, 'fanout', NEW.members_fanout, 'ended', NEW.members_ended),
    'created_at', lr_ts(NEW.created_at), 'updated_at', lr_ts(NEW.updated_at))));
  RETURN NULL;
END $$;

CREATE TRIGGER channels_event_ended AFTER UPDATE OF status ON channels
  FOR EACH ROW WHEN (NEW.status = 'ended' AND OLD.status IS DISTINCT FROM 'ended') EXECUTE FUNCTION lr_event_channel_ended();

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['channels', 'channel_operations'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;

-- Target objects of events show channel membership as the API does (Encode.target): the
-- target.ready / target.ended trigger appends channel_id and delivery to lr_target_object (so a
-- later change to lr_target_object's other fields needs no change here).
CREATE OR REPLACE FUNCTION lr_targets_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM lr_event_insert(NEW.tenant_id, 'target.' || NEW.status, NEW.id, NEW.channel_id,
                          lr_target_object(NEW) || jsonb_build_object('channel_id', NEW.channel_id, 'delivery', NEW.delivery));
  RETURN NULL;
END $$;
