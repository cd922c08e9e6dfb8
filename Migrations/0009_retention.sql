-- 0009: retention purge and per-tenant caps (docs/security.md "Retention", "Per-tenant caps").

-- Terminal targets by the time they ended: the purge deletes the oldest first.
CREATE INDEX targets_terminal_ended ON targets ((COALESCE(ended_at, updated_at)))
  WHERE status IN ('ended', 'creation_failed');
-- Idempotency records by age: write keys go one day after the retention of their operations.
CREATE INDEX idempotency_records_created ON idempotency_records (created_at);
-- Counting a tenant's live targets and active installations for the caps.
CREATE INDEX targets_live_tenant ON targets (tenant_id) WHERE status NOT IN ('ended', 'creation_failed');
CREATE INDEX installations_active_tenant ON installations (tenant_id) WHERE status = 'active';
-- Registrations compare install_id in canonical lowercase form (docs/security.md "Installations").
CREATE INDEX installations_active_install_lower ON installations (tenant_id, app_id, platform, lower(install_id))
  WHERE status = 'active';
