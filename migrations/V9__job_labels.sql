-- Label selectors (GET /v1/jobs?selector=..., POST /v1/jobs/bulk) test a
-- live job's labels by containment: `team=payments` is
-- spec->'labels' @> '{"team":"payments"}' and `env in (a,b)` is @> ANY of
-- such objects, which this index answers. jsonb_path_ops keeps one hash per
-- key/value pair, smaller than the default operator class; the key-only
-- terms (`team`, `!team`) and the negated ones do not use it.
CREATE INDEX jobs_live_labels ON jobs USING gin ((spec->'labels') jsonb_path_ops) WHERE deleted_at IS NULL;
