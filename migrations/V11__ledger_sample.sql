-- A fixed pseudo-random 1/8 of the ledger's rows, by a hash of the
-- execution id (a bucket 0..65535, below 8192), ordered by bucket and slot:
-- the console's lateness view reads buckets 0..k of a window through it, a
-- uniform sample of rate k/65536 whose cost does not grow with the window's
-- rows (GET /v1/stats/lateness, common::ledger::stats). The bucket depends on
-- neither the slot's time nor its outcome, so herds of slots due in the same
-- second are sampled like any other. Partial: a write evaluates the hash, and
-- only the sampled rows are indexed.
CREATE INDEX scheduled_jobs_sample ON scheduled_jobs ((hashtext(execution_id) & 65535), scheduled_at)
    WHERE (hashtext(execution_id) & 65535) < 8192;
