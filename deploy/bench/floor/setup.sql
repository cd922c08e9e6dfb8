-- The SQL floor of a push (deploy/bench/dispatch, docs/delivery.md "Measuring"): the fewest
-- writes the contract asks of PostgreSQL per push, on the friendliest tables there can be.
-- A claim marks the operation `sending` under a lease; the result marks it `accepted` and
-- records its operation.accepted event in the same transaction (docs/webhooks.md: an event
-- is written with the change it reports). One row per operation, a primary key only, pages
-- 30 % free so every status change is a HOT update, no triggers, no row-level security, no
-- dispatch heads, no quota, no priority budget, no target rows. Any real dispatcher does at
-- least this, so pushes/s here bound what any dispatcher can reach on this machine.
DROP TABLE IF EXISTS floor_ops, floor_events;
CREATE TABLE floor_ops (
  id                bigint PRIMARY KEY,
  status            text NOT NULL,
  lease_owner       text,
  lease_expires_at  timestamptz,
  attempts          int NOT NULL DEFAULT 0,
  sent_at           timestamptz,
  accepted_at       timestamptz,
  apns_id           text,
  updated_at        timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);
INSERT INTO floor_ops (id, status) SELECT g, 'queued' FROM generate_series(0, 199999) g;
CREATE TABLE floor_events (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  op_id       bigint NOT NULL,
  type        text NOT NULL,
  data        jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
VACUUM ANALYZE floor_ops;
