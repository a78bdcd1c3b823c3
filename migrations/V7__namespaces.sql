-- Namespaces: every job belongs to one, and API tokens are scoped to them.
-- Quotas are per namespace; NULL = no limit.
CREATE TABLE namespaces (
    name                  text        PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    max_jobs              bigint      CHECK (max_jobs >= 0),
    max_fires_per_second  double precision CHECK (max_fires_per_second >= 0),
    created_at            timestamptz NOT NULL DEFAULT now()
);

-- Jobs made before namespaces existed, and those of a deployment that never
-- creates one, live here.
INSERT INTO namespaces (name) VALUES ('default');

ALTER TABLE jobs ADD COLUMN namespace text NOT NULL DEFAULT 'default' REFERENCES namespaces (name);
-- The most fires per second the job's schedule can make (its densest
-- stretch), summed per namespace against `max_fires_per_second`.
ALTER TABLE jobs ADD COLUMN peak_fires_per_second double precision NOT NULL DEFAULT 0;
CREATE INDEX jobs_live_namespace ON jobs (namespace, id) WHERE deleted_at IS NULL;

-- API tokens beside the bootstrap ones of API_TOKENS. Only a SHA-256 of the
-- token is kept: a token is shown once, when it is created.
CREATE TABLE api_tokens (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    token_hash  bytea       NOT NULL UNIQUE,
    role        text        NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    -- The namespaces the token may act in.
    namespaces  text[]      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
