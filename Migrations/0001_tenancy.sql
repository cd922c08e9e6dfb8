-- 0001: tenants and credentials (SPEC §2, §3, §4 operator / tenant admin / device registration).
-- Every tenant table carries tenant_id, and every primary key, unique constraint and foreign key
-- includes it (SPEC §9, Citus-ready). Row-level security is the second wall: a transaction sees
-- a tenant's rows only when it set app.tenant_id to that tenant (SET LOCAL via set_config), or
-- when it declared the system scope (app.scope = 'system': credential lookup before the tenant
-- is known, operator endpoints, workers). Ids are text with a type prefix, compared bytewise.

CREATE FUNCTION lr_tenant_visible(row_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT row_tenant = current_setting('app.tenant_id', true)
      OR current_setting('app.scope', true) = 'system'
$$;

-- Operator credentials belong to the deployment, not to a tenant (the one table without tenant_id
-- besides schema_migrations).
CREATE TABLE operator_keys (
  id            text COLLATE "C" PRIMARY KEY,
  label         text NOT NULL DEFAULT '',
  secret_hash   text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz
);

CREATE TABLE tenants (
  tenant_id        text COLLATE "C" NOT NULL,
  name             text NOT NULL,
  daily_push_quota bigint NOT NULL CHECK (daily_push_quota >= 0),
  status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id)
);

CREATE TABLE master_keys (
  tenant_id     text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id            text COLLATE "C" NOT NULL,
  label         text NOT NULL DEFAULT '',
  secret_hash   text NOT NULL,
  created_by    text COLLATE "C",
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz,             -- when revocation was requested
  expires_at    timestamptz,             -- stops working at this time (revoke with a grace period)
  last_used_at  timestamptz,
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX master_keys_id ON master_keys (id);

CREATE TABLE sender_keys (
  tenant_id     text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id            text COLLATE "C" NOT NULL,
  label         text NOT NULL DEFAULT '',
  secret_hash   text NOT NULL,
  targets       text[] NOT NULL,
  created_from  text[] NOT NULL,
  permissions   text[] NOT NULL,
  created_by    text COLLATE "C" NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz,
  revoked_at    timestamptz,
  last_used_at  timestamptz,
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX sender_keys_id ON sender_keys (id);

CREATE TABLE publishable_keys (
  tenant_id     text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id            text COLLATE "C" NOT NULL,
  app_id        text,                     -- NULL: any app of the tenant (the key made with the tenant)
  platform      text CHECK (platform IN ('ios', 'android')),
  label         text NOT NULL DEFAULT '',
  secret_hash   text NOT NULL,
  created_by    text COLLATE "C",
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz,
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX publishable_keys_id ON publishable_keys (id);

CREATE TABLE installations (
  tenant_id          text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id                 text COLLATE "C" NOT NULL,
  publishable_key_id text COLLATE "C" NOT NULL,
  app_id             text NOT NULL,
  platform           text NOT NULL CHECK (platform IN ('ios', 'android')),
  environment        text NOT NULL CHECK (environment IN ('sandbox', 'production')),
  install_id         text NOT NULL,
  fcm_token          text,
  status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retired')),
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  retired_at         timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, publishable_key_id) REFERENCES publishable_keys (tenant_id, id)
);

-- One active installation per client install_id; a retired one stays as history and a later
-- registration with the same install_id makes a new connection (SPEC §4 disconnect).
CREATE UNIQUE INDEX installations_active_install ON installations (tenant_id, app_id, platform, install_id)
  WHERE status = 'active';

CREATE TABLE installation_credentials (
  tenant_id        text COLLATE "C" NOT NULL,
  id               text COLLATE "C" NOT NULL,
  installation_id  text COLLATE "C" NOT NULL,
  secret_hash      text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz,          -- set on renewal: the old credential works 5 more minutes
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, installation_id) REFERENCES installations (tenant_id, id)
);
CREATE INDEX installation_credentials_id ON installation_credentials (id);

CREATE TABLE audit_events (
  tenant_id    text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  id           text COLLATE "C" NOT NULL,
  actor_id     text COLLATE "C" NOT NULL,     -- key id (mk_…, opk_…), never a secret
  action       text NOT NULL,                 -- e.g. sender_key.create
  object_type  text NOT NULL,
  object_id    text COLLATE "C",
  request_id   text NOT NULL,
  details      jsonb NOT NULL DEFAULT '{}',
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);

-- SPEC §3 idempotency: scope (tenant, endpoint, key). The response is stored to be replayed;
-- responses holding a secret are stored AES-256-GCM-encrypted (response_sealed) and purged
-- after 24 h.
CREATE TABLE idempotency_records (
  tenant_id        text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  endpoint         text NOT NULL,
  key              text NOT NULL,
  request_hash     text NOT NULL,
  status_code      int NOT NULL,
  response_body    bytea,
  response_sealed  bytea,
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, endpoint, key)
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['tenants', 'master_keys', 'sender_keys', 'publishable_keys', 'installations',
                           'installation_credentials', 'audit_events', 'idempotency_records'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;
