-- The SQL floor of an accepted update (deploy/bench/writes, docs/write-path.md "Benchmark"):
-- the fewest writes the contract asks of PostgreSQL per update, on the friendliest tables there
-- can be. An update with an idempotency key claims the key and stores its response in the same
-- transaction (docs/write-semantics.md), moves the target to its new revision and state under
-- the target's row lock, stores the operation for the dispatcher, supersedes the operation it
-- replaces and counts the tenant's daily quota. Integer keys, one primary key per table (the
-- operations' serves both the supersede and the dispatcher's head), pages 30 % free so the
-- target and counter changes are HOT updates, no triggers, no row-level security, no events,
-- no dispatch heads, no payload checks. So updates/s here bound what any write path can store
-- on this machine; the bench prints it beside pgbench's tpcb-like TPS of the same run.
DROP TABLE IF EXISTS fw_targets, fw_ops, fw_idem, fw_quota;
CREATE TABLE fw_targets (
  id         int PRIMARY KEY,
  revision   int NOT NULL,
  op_seq     int NOT NULL,
  state      jsonb NOT NULL,
  updated_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE TABLE fw_ops (
  target_id  int NOT NULL,
  seq        int NOT NULL,
  status     text NOT NULL,
  revision   int NOT NULL,
  state      jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (target_id, seq)
) WITH (fillfactor = 70);
CREATE TABLE fw_idem (
  key          text PRIMARY KEY,
  request_hash text NOT NULL,
  status_code  int NOT NULL,
  response     jsonb
);
CREATE TABLE fw_quota (
  day      date NOT NULL,
  shard    int NOT NULL,
  reserved bigint NOT NULL,
  PRIMARY KEY (day, shard)
) WITH (fillfactor = 70);
-- 62 targets for each of up to 64 clients (deploy/bench/floor/write.sql).
INSERT INTO fw_targets SELECT g, 1, 1, '{"eta": 30, "status": "preparing"}', now() FROM generate_series(0, 64 * 62 - 1) g;
INSERT INTO fw_ops SELECT g, 1, 'queued', 1, '{"eta": 30, "status": "preparing"}', now() FROM generate_series(0, 64 * 62 - 1) g;
INSERT INTO fw_quota SELECT current_date, g, 0 FROM generate_series(0, 63) g;
VACUUM ANALYZE fw_targets, fw_ops, fw_idem, fw_quota;
