-- 0006: idempotency for the operator's tenant creation (SPEC §3). Operator requests belong to no
-- tenant, so they cannot use idempotency_records (whose key starts with an existing tenant);
-- the response holds the new tenant's first secrets, so it is stored only sealed (AES-256-GCM
-- under the KEK) and purged after 24 h like tenant records.
CREATE TABLE operator_idempotency_records (
  key              text NOT NULL PRIMARY KEY,
  endpoint         text NOT NULL,
  request_hash     text NOT NULL,
  status_code      int NOT NULL,
  response_sealed  bytea,
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL
);
CREATE INDEX operator_idempotency_records_expiry ON operator_idempotency_records (expires_at);
