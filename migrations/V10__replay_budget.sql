-- A replayed execution gets a retry budget of its own: its attempts from
-- `retry_from + 1` on are counted against `retry_policy` (the one the
-- replay asked for), or the job's policy when that is NULL. Every path
-- that publishes the row reads both, so a sweep's republish keeps them.
-- Constant defaults: instant on existing partitions (no rewrite).
ALTER TABLE scheduled_jobs ADD COLUMN retry_from integer NOT NULL DEFAULT 0;
ALTER TABLE scheduled_jobs ADD COLUMN retry_policy jsonb;
