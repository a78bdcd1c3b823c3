-- Per-slot history, so "did it fire, and if not, why?" has an answer for
-- every attempt, not only the last one. A JSON array on the ledger row
-- itself: it is written in the same UPDATE that records an outcome (no
-- second table, no second index to maintain on the hot path) and is dropped
-- with the row's day partition. Entries (appended, never rewritten):
--   {"event":"attempt","attempt":n,"worker_id":..,"started_at":..,
--    "finished_at":..,"outcome":"succeeded|retrying|failed",
--    "http_status":..,"sqs_message_id":..,"error":..,"redelivered":bool}
--   {"event":"skipped","at":..,"reason":"deleted|paused|superseded"}
--   {"event":"recovered","at":..}   (stuck running, delivered again)
--   {"event":"replay","at":..}      (an operator's replay through the API)
-- Instants are RFC 3339 with milliseconds and Z, as in the delivery headers.
-- A constant default makes this instant on existing partitions (no rewrite).
ALTER TABLE scheduled_jobs ADD COLUMN history jsonb NOT NULL DEFAULT '[]'::jsonb;

-- The RFC 3339 form used in history entries (and in execution ids), so
-- every writer of history formats instants identically.
CREATE FUNCTION cronshard_instant(t timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
