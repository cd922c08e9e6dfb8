-- 0038: `idempotency_records` and `push_quota` lose their foreign keys to `tenants`
-- (docs/write-path.md "Tenant keys"), as `events` did in 0036.
--
-- Every accepted write inserts an idempotency record and upserts quota counter rows, and each
-- key made PostgreSQL check the tenant again: a `SELECT … FOR KEY SHARE` of the tenant's row
-- through the referential-integrity trigger. All of a tenant's concurrent writers share-lock that
-- one row, so beside the lookup itself they kept building multixacts on it. deploy/bench/writes,
-- alternating runs of one build (16 clients, 1,000 targets): 1,183 and 1,192 updates/s with the
-- keys, 1,293 and 1,412 without; `ratio_writes_to_pgbench_tps` 0.197 and 0.201 against 0.209
-- and 0.216.
--
-- The keys guarded nothing the schema does not already guarantee: an idempotency record's tenant
-- is the authenticated request's, a counter row's is that of the operation or channel operation
-- whose trigger writes it (both keyed to tenants through their targets and channels), and
-- tenants are never deleted (suspension is a status). Row-level security still admits only the
-- session's tenant in a tenant's scope.
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_tenant_id_fkey;
ALTER TABLE push_quota DROP CONSTRAINT push_quota_tenant_id_fkey;
