-- One accepted update (deploy/bench/floor/write-setup.sql), as pgbench -M prepared runs it with
-- the bench's client count. Each client owns its own 62 targets and counter shard (up to 64
-- clients; more share them), as the bench's connections never write one target at once.
\set t (:client_id % 64) * 62 + random(0, 61)
\set k random(1, 2000000000)
BEGIN;
INSERT INTO fw_idem (key, request_hash, status_code) VALUES (CAST(:client_id AS text) || '-' || CAST(:k AS text), md5(CAST(:k AS text)), 0) ON CONFLICT DO NOTHING;
UPDATE fw_targets SET revision = revision + 1, op_seq = op_seq + 1, state = jsonb_build_object('eta', CAST(:k AS int) % 60, 'status', 'on the way'),
       updated_at = now()
 WHERE id = :t RETURNING op_seq AS seq, revision AS rev \gset
INSERT INTO fw_ops (target_id, seq, status, revision, state, created_at)
VALUES (:t, :seq, 'queued', :rev, jsonb_build_object('eta', CAST(:k AS int) % 60, 'status', 'on the way'), now());
UPDATE fw_ops SET status = 'superseded' WHERE target_id = :t AND seq = :seq - 1 AND status = 'queued';
UPDATE fw_quota SET reserved = reserved + 1 WHERE day = current_date AND shard = :client_id % 64;
UPDATE fw_idem SET status_code = 202, response = jsonb_build_object('target_id', CAST(:t AS int), 'revision', CAST(:rev AS int))
 WHERE key = CAST(:client_id AS text) || '-' || CAST(:k AS text);
COMMIT;
