-- 0003: operations (accepted writes and their delivery status), the dispatch queue they form,
-- and the daily push quota (SPEC §5). Same conventions: tenant_id first in every key, forced RLS.

CREATE TABLE operations (
  tenant_id          text COLLATE "C" NOT NULL,
  id                 text COLLATE "C" NOT NULL,
  target_id          text COLLATE "C" NOT NULL,
  seq                bigint NOT NULL,            -- commit order within the target
  kind               text NOT NULL CHECK (kind IN ('start', 'update', 'end')),
  status             text NOT NULL CHECK (status IN ('queued', 'sending', 'accepted', 'failed', 'cancelled',
                                                   'superseded', 'unknown', 'expired')),
  pending_reason     text,
  revision           bigint NOT NULL,            -- the target revision this operation carries
  has_state          boolean NOT NULL,
  state              jsonb,                      -- the full committed snapshot (state-bearing writes)
  alert              jsonb,
  stale_at           timestamptz,
  relevance_score    double precision,
  priority           int NOT NULL DEFAULT 10 CHECK (priority IN (5, 10)),
  expires_at         timestamptz,
  dismiss_at         timestamptz,
  superseded_by      text COLLATE "C",
  apns_id            text,
  failure            jsonb,
  consumes_quota     boolean NOT NULL,
  quota_day          date,
  created_by_key_id  text COLLATE "C",
  idempotency_key    text,
  attempts           int NOT NULL DEFAULT 0,
  next_attempt_at    timestamptz NOT NULL DEFAULT now(),
  lease_owner        text,
  lease_expires_at   timestamptz,
  sent_at            timestamptz,
  provider_timestamp bigint,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  accepted_at        timestamptz,
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, target_id, seq),
  FOREIGN KEY (tenant_id, target_id) REFERENCES targets (tenant_id, id)
);
CREATE INDEX operations_target ON operations (tenant_id, target_id, id);
-- The dispatch queue: queued operations by due time.
CREATE INDEX operations_queue ON operations (next_attempt_at) WHERE status = 'queued';
CREATE INDEX operations_sending ON operations (lease_expires_at) WHERE status = 'sending';
-- Reserved quota is derived from the operations themselves (no shared counter row to lock at
-- write time): state-bearing operations of the day still queued or sending.
CREATE INDEX operations_quota_reserved ON operations (tenant_id, quota_day)
  WHERE consumes_quota AND status IN ('queued', 'sending');

-- Push quota per tenant and UTC day: units used (accepted by the provider). The reserved units
-- are counted from operations (index above). Counters are spread over 16 shard rows per
-- (tenant, day) so concurrent dispatchers do not queue on one row lock; only sums mean anything.
CREATE TABLE push_quota (
  tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  day        date NOT NULL,
  shard      smallint NOT NULL DEFAULT 0 CHECK (shard BETWEEN 0 AND 15),
  reserved   bigint NOT NULL DEFAULT 0,
  used       bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, day, shard)
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['operations', 'push_quota'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;
