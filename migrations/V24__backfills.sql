-- Backfills: a job's past slots run on request, at a bounded rate and
-- concurrency, by whichever scheduler takes the backfill next (one at a
-- time: a row lock with SKIP LOCKED). `slots` is the plan, in the order it
-- runs; `next_index` counts the slots handled, advanced in the same
-- transaction as the ledger rows they made, so a node lost mid-backfill
-- leaves a plan another node continues without running a slot twice.
CREATE TABLE backfills (
    id              uuid        PRIMARY KEY,
    job_id          uuid        NOT NULL,
    namespace       text        NOT NULL,
    from_at         timestamptz NOT NULL,
    to_at           timestamptz NOT NULL,
    mode            text        NOT NULL CHECK (mode IN ('missing', 'failed', 'all')),
    newest_first    boolean     NOT NULL,
    rate_per_second double precision NOT NULL CHECK (rate_per_second > 0),
    max_concurrency integer     NOT NULL CHECK (max_concurrency > 0),
    -- The overlap policy its executions follow; NULL: the job's own.
    overlap         text        CHECK (overlap IN ('allow', 'forbid', 'replace')),
    slots           timestamptz[] NOT NULL,
    next_index      integer     NOT NULL DEFAULT 0,
    -- Slots handled without a run: not missing, not failed, or in flight.
    passed_over     integer     NOT NULL DEFAULT 0,
    state           text        NOT NULL CHECK (state IN ('running', 'cancelled', 'done')),
    -- When the next slot may start (the rate).
    next_at         timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    finished_at     timestamptz
);

-- One running backfill per job: two would race for the same slots.
CREATE UNIQUE INDEX backfills_running_job ON backfills (job_id) WHERE state = 'running';
CREATE INDEX backfills_due ON backfills (next_at) WHERE state = 'running';
CREATE INDEX backfills_job ON backfills (job_id, created_at DESC);

-- Which backfill last started a row: a backfill's progress counts its own
-- runs, not an earlier backfill's of the same slots.
ALTER TABLE scheduled_jobs ADD COLUMN backfill_id uuid;

-- A backfilled execution says so. NOT VALID: every stored row holds one of
-- the older values, and validating would scan the whole ledger under the
-- migration's lock; new rows and new partitions are checked.
ALTER TABLE scheduled_jobs DROP CONSTRAINT scheduled_jobs_trigger_check;
ALTER TABLE scheduled_jobs ADD CONSTRAINT scheduled_jobs_trigger_check
    CHECK (trigger IN ('schedule', 'manual', 'misfire', 'backfill')) NOT VALID;
