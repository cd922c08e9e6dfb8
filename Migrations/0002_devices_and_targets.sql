-- 0002: device registry, templates, start targets and live-activity targets (SPEC §1, §4 device
-- endpoints, §5, §6). Same conventions as 0001: tenant_id first in every key, forced RLS.

-- A render script / widget family inside an installation; its id is chosen by the device and
-- survives renames, so it is unique per installation.
CREATE TABLE bindings (
  tenant_id        text COLLATE "C" NOT NULL,
  installation_id  text COLLATE "C" NOT NULL,
  id               text COLLATE "C" NOT NULL,
  status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retired')),
  created_at       timestamptz NOT NULL DEFAULT now(),
  retired_at       timestamptz,
  PRIMARY KEY (tenant_id, installation_id, id),
  FOREIGN KEY (tenant_id, installation_id) REFERENCES installations (tenant_id, id)
);

-- Immutable renderer identity + pinned schema (SPEC §6). The id is derived from the content.
CREATE TABLE template_versions (
  tenant_id          text COLLATE "C" NOT NULL,
  installation_id    text COLLATE "C" NOT NULL,
  binding_id         text COLLATE "C" NOT NULL,
  id                 text COLLATE "C" NOT NULL,
  activity_type      text NOT NULL,
  attributes_type    text NOT NULL,
  renderer_digest    text NOT NULL,
  schema             jsonb,
  resources          jsonb NOT NULL DEFAULT '[]',
  bundle_bytes       bigint NOT NULL,
  bundle_modules     int NOT NULL,
  bundle_files       int NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  -- when the last reference ended (NULL while referenced or never released): collectable 7 days later
  released_at        timestamptz,
  PRIMARY KEY (tenant_id, installation_id, binding_id, id),
  FOREIGN KEY (tenant_id, installation_id, binding_id) REFERENCES bindings (tenant_id, installation_id, id)
);

-- A prepared remote-start endpoint: binding + activity type + current template version +
-- push-to-start token. Android start targets need no token (ready once the installation has an
-- FCM token).
CREATE TABLE start_targets (
  tenant_id                 text COLLATE "C" NOT NULL,
  id                        text COLLATE "C" NOT NULL,
  installation_id           text COLLATE "C" NOT NULL,
  binding_id                text COLLATE "C" NOT NULL,
  activity_type             text NOT NULL,
  current_template_version  text COLLATE "C" NOT NULL,
  push_to_start_token       text,
  status                    text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ready', 'retired')),
  created_at                timestamptz NOT NULL DEFAULT now(),
  updated_at                timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, installation_id, binding_id, activity_type),
  FOREIGN KEY (tenant_id, installation_id, binding_id) REFERENCES bindings (tenant_id, installation_id, id)
);

-- One live activity instance (local or remote origin).
CREATE TABLE targets (
  tenant_id            text COLLATE "C" NOT NULL,
  id                   text COLLATE "C" NOT NULL,
  installation_id      text COLLATE "C" NOT NULL,
  start_target_id      text COLLATE "C",          -- remote starts
  created_by_key_id    text COLLATE "C",          -- the sender key of a remote start
  origin               text NOT NULL CHECK (origin IN ('local', 'remote')),
  activity_type        text NOT NULL,
  template_version     text COLLATE "C",
  business_key         text,
  business_generation  text,
  status               text NOT NULL CHECK (status IN ('reserved', 'starting', 'token_pending', 'ready', 'ending',
                                                      'ended', 'creation_failed', 'start_unknown')),
  end_reason           text CHECK (end_reason IN ('sender', 'device', 'token_invalid', 'installation_retired', 'system_expired')),
  revision             bigint NOT NULL DEFAULT 1,
  state                jsonb NOT NULL,
  source_version       bigint,
  stale_at             timestamptz,
  relevance_score      double precision,
  push_token           text,
  token_status         text NOT NULL DEFAULT 'pending' CHECK (token_status IN ('pending', 'registered', 'invalid')),
  last_render_report   jsonb,
  op_seq               bigint NOT NULL DEFAULT 0,   -- last operation sequence number (commit order per target)
  last_timestamp       bigint NOT NULL DEFAULT 0,   -- last APNs timestamp sent (strictly increasing per target)
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now(),
  started_at           timestamptz NOT NULL DEFAULT now(),
  ended_at             timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, installation_id) REFERENCES installations (tenant_id, id),
  FOREIGN KEY (tenant_id, start_target_id) REFERENCES start_targets (tenant_id, id)
);
-- One target at most per (tenant, business_key, business_generation) (SPEC §1).
CREATE UNIQUE INDEX targets_business_instance ON targets (tenant_id, business_key, business_generation)
  WHERE business_key IS NOT NULL;
CREATE INDEX targets_installation ON targets (tenant_id, installation_id);
CREATE INDEX targets_start_target ON targets (tenant_id, start_target_id);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['bindings', 'template_versions', 'start_targets', 'targets'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;
