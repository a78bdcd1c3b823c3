-- The delivery contract (docs/schedules.md, "What a delivery's answer
-- means"; docs/security.md, "Signed deliveries").

-- The receiver's chosen response headers of the latest attempt, beside its
-- status (`http_status`) and the first bytes of its body
-- (`response_excerpt`); each attempt's own are in `history`.
ALTER TABLE scheduled_jobs ADD COLUMN response_headers jsonb;

-- Signing secrets of a namespace (Standard Webhooks): every active key
-- signs every HTTP delivery of the namespace's jobs. The secret is stored
-- only sealed by the namespace's data key (as secret header values are);
-- it is shown once, when it is made. A rotation keeps the old keys signing
-- until `expires_at`; a revoked key signs no more.
CREATE TABLE signing_keys (
    id          uuid        PRIMARY KEY,
    namespace   text        NOT NULL REFERENCES namespaces (name),
    sealed      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    revoked_by  text
);
CREATE INDEX signing_keys_namespace ON signing_keys (namespace, created_at);
