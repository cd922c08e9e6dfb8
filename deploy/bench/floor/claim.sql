-- One claim of 64 on tenant :tenant (deploy/bench/floor/claim-setup.sql), timed by pgbench -r
-- (the claim statement and its COMMIT), then, in a second transaction, its operations are
-- queued again behind everything else (as the bench's claims accept them and queue a new update
-- on each target), so every claim of the large queue takes rows no earlier claim touched and
-- the small queue keeps its size.
BEGIN;
WITH picked AS (
  DELETE FROM floor_cq q
   WHERE q.tenant_id = :tenant
     AND q.op_id IN (SELECT op_id FROM floor_cq WHERE tenant_id = :tenant ORDER BY due_at LIMIT 64)
  RETURNING q.op_id, q.target_id
), clocks AS (
  UPDATE floor_ctargets t SET last_timestamp = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
    FROM picked p WHERE t.tenant_id = :tenant AND t.id = p.target_id
  RETURNING t.id
)
UPDATE floor_cops o SET status = 'sending', lease_expires_at = now() + interval '30 seconds', attempts = o.attempts + 1
  FROM picked p WHERE o.tenant_id = :tenant AND o.id = p.op_id AND EXISTS (SELECT 1 FROM clocks);
COMMIT;
BEGIN;
WITH requeued AS (
  UPDATE floor_cops SET status = 'queued', lease_expires_at = NULL
   WHERE tenant_id = :tenant AND status = 'sending'
  RETURNING id, target_id
)
INSERT INTO floor_cq SELECT :tenant, id, target_id, 2000000 + (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM requeued;
COMMIT;
