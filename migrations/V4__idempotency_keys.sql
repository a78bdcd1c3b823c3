-- Idempotency-Key on POST /v1/jobs: a retried create replays the first
-- response instead of creating a second job. The key row is inserted in the
-- same transaction as the job; the primary key makes a concurrent duplicate
-- wait for the first transaction and then find its row.
--   scope        hex SHA-256 of the caller's bearer token ('' when auth is off),
--                so two tenants' keys never collide
--   request_hash hex SHA-256 of the validated job definition
--   response     the first response's body, replayed byte for byte
-- Keys expire after 24 hours; the API deletes expired rows lazily (a bounded
-- batch after each keyed create), and an expired key may be used again.
CREATE TABLE idempotency_keys (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    request_hash  text        NOT NULL,
    job_id        uuid        NOT NULL,
    status        smallint    NOT NULL,
    response      text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
