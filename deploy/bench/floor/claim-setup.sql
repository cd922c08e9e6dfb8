-- The SQL floor of a claim's cost growth (deploy/bench/dispatch, docs/delivery.md "Measuring"):
-- the fewest writes the contract asks of a claim of 64, on the friendliest tables there can be,
-- with a small queue (tenant 0: 1,000 targets, 1,000 queued) and a large one (tenant 1:
-- 1,000,000 targets, 100,000 queued on distinct targets), as the bench's claim_ms_p50_* figures.
-- A claim takes the 64 earliest due queue entries, marks their operations `sending` under a
-- lease and stamps their targets' clocks (at most one in flight per target, strictly increasing
-- timestamps: docs/semantics.md). Integer keys, a primary key per table and the queue's due
-- index only, pages 30 % free so each change of an operation or a clock is a HOT update, no
-- triggers, no row-level security, no events. So the ratio of the two claims' times is the
-- growth the data's size alone costs on this machine.
DROP TABLE IF EXISTS floor_cq, floor_cops, floor_ctargets;
CREATE TABLE floor_ctargets (
  tenant_id      int NOT NULL,
  id             bigint NOT NULL,
  last_timestamp bigint NOT NULL DEFAULT 0,
  state          text NOT NULL,
  PRIMARY KEY (tenant_id, id)
) WITH (fillfactor = 70);
CREATE TABLE floor_cops (
  tenant_id        int NOT NULL,
  id               bigint NOT NULL,
  target_id        bigint NOT NULL,
  status           text NOT NULL,
  lease_expires_at timestamptz,
  attempts         int NOT NULL DEFAULT 0,
  state            text NOT NULL,
  PRIMARY KEY (tenant_id, id)
) WITH (fillfactor = 70);
CREATE TABLE floor_cq (
  tenant_id int NOT NULL,
  op_id     bigint NOT NULL,
  target_id bigint NOT NULL,
  due_at    bigint NOT NULL,
  PRIMARY KEY (tenant_id, op_id)
);
CREATE INDEX floor_cq_due ON floor_cq (tenant_id, due_at);
-- Small: targets 0..999, one queued operation each.
INSERT INTO floor_ctargets (tenant_id, id, state) SELECT 0, g, repeat('s', 300) FROM generate_series(0, 999) g;
INSERT INTO floor_cops (tenant_id, id, target_id, status, state) SELECT 0, g, g, 'queued', repeat('o', 200) FROM generate_series(0, 999) g;
INSERT INTO floor_cq SELECT 0, g, g, (random() * 1000000)::bigint FROM generate_series(0, 999) g;
-- Large: targets 0..999,999; 100,000 operations queued on every tenth target, due in random order.
INSERT INTO floor_ctargets (tenant_id, id, state) SELECT 1, g, repeat('s', 300) FROM generate_series(0, 999999) g;
INSERT INTO floor_cops (tenant_id, id, target_id, status, state) SELECT 1, g, g * 10, 'queued', repeat('o', 200) FROM generate_series(0, 99999) g;
INSERT INTO floor_cq SELECT 1, g, g * 10, (random() * 1000000)::bigint FROM generate_series(0, 99999) g;
VACUUM ANALYZE floor_ctargets, floor_cops, floor_cq;
