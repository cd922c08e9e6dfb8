-- One pgbench transaction = one batch of 512 pushes (deploy/bench/floor/setup.sql): the claim
-- in its own transaction, then the results with their events. Each client works in its own
-- 100,000 rows (client_id 0 or 1), so clients never wait on each other's row locks.
\set lo :client_id * 100000 + random(0, 99487)
BEGIN;
UPDATE floor_ops SET status = 'sending', lease_owner = 'floor', lease_expires_at = now() + interval '30 seconds',
       attempts = attempts + 1, sent_at = now(), updated_at = now()
 WHERE id >= :lo AND id < :lo + 512;
COMMIT;
BEGIN;
UPDATE floor_ops SET status = 'accepted', accepted_at = now(), apns_id = md5(id::text), lease_owner = NULL,
       lease_expires_at = NULL, updated_at = now()
 WHERE id >= :lo AND id < :lo + 512;
INSERT INTO floor_events (op_id, type, data)
SELECT g, 'operation.accepted', jsonb_build_object('id', g, 'object', 'operation', 'status', 'accepted')
  FROM generate_series(:lo, :lo + 511) g;
COMMIT;
