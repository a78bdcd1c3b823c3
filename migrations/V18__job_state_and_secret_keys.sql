-- A job's operational state apart from its definition: who paused it, when
-- and why. A replace or patch of the definition keeps these (and `paused`).
ALTER TABLE jobs ADD COLUMN paused_at timestamptz;
ALTER TABLE jobs ADD COLUMN paused_by text;
ALTER TABLE jobs ADD COLUMN paused_by_token uuid;
ALTER TABLE jobs ADD COLUMN pause_note text CHECK (length(pause_note) <= 500);

-- Data keys of the envelope encryption of secret header values: one per
-- namespace (several after a data key is replaced), each sealed by a
-- key-encryption key the operator supplies (SECRETS_KEK). Only the sealed
-- form is stored; `kek_id` names the key that sealed it.
CREATE TABLE secret_data_keys (
    id          uuid        PRIMARY KEY,
    namespace   text        NOT NULL REFERENCES namespaces (name),
    kek_id      text        NOT NULL,
    sealed      bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX secret_data_keys_namespace ON secret_data_keys (namespace, created_at DESC);
