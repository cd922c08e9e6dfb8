-- 0004: per-tenant provider credentials (SPEC §4 "provider-credentials", §8, §9).
-- Private keys are stored only AES-256-GCM-sealed under LIVERELAY_KEK (associated data binds
-- each box to its tenant, provider and environment, so a box copied to another row does not
-- open). Nothing else here is secret: team/key ids, project id, client email, token URI and the
-- public-key fingerprint ("sha256:<hex of the SubjectPublicKeyInfo DER>") are shown to the
-- tenant. last_* columns are written by the dispatcher's provider sender (coalesced), only
-- while the fingerprint still matches (a late report about a replaced key changes nothing).

-- APNs token-auth keys (.p8, P-256): one per tenant and APNs environment (an Apple key works in
-- both; a push uses the credential of its installation's environment, else the other one).
CREATE TABLE apns_credentials (
  tenant_id            text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  environment          text NOT NULL CHECK (environment IN ('sandbox', 'production')),
  team_id              text NOT NULL CHECK (team_id ~ '^[A-Z0-9]{10}$'),
  key_id               text NOT NULL CHECK (key_id ~ '^[A-Z0-9]{10}$'),
  topics               text[] NOT NULL CHECK (cardinality(topics) >= 1),
  private_key_sealed   bytea NOT NULL,
  fingerprint          text NOT NULL,
  created_by           text COLLATE "C" NOT NULL,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now(),
  last_success_at      timestamptz,
  last_failure_at      timestamptz,
  last_failure_reason  text,
  PRIMARY KEY (tenant_id, environment)
);

-- FCM HTTP v1 service accounts (RSA key, OAuth2 JWT-bearer grant): one per tenant.
CREATE TABLE fcm_credentials (
  tenant_id            text COLLATE "C" NOT NULL REFERENCES tenants (tenant_id),
  project_id           text NOT NULL,
  client_email         text NOT NULL,
  private_key_id       text NOT NULL,
  token_uri            text NOT NULL,
  private_key_sealed   bytea NOT NULL,
  fingerprint          text NOT NULL,
  created_by           text COLLATE "C" NOT NULL,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now(),
  last_success_at      timestamptz,
  last_failure_at      timestamptz,
  last_failure_reason  text,
  PRIMARY KEY (tenant_id)
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['apns_credentials', 'fcm_credentials'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (lr_tenant_visible(tenant_id)) WITH CHECK (lr_tenant_visible(tenant_id))', t);
  END LOOP;
END $$;
