-- A run of consecutive slots of one job version decided together without
-- firing (a misfire policy's verdict on an outage): one row for the whole
-- run instead of one ledger row per slot. After a 5-minute outage of every
-- scheduler, 10,000 jobs firing every 5 s had 557,051 slots to record one
-- by one, each written before the job's next fire, so the live slots
-- waited for the ledger; a day-long outage of an every-second job meant
-- 86,400 rows. The run covers every due slot of the job from first_at to
-- last_at (both inclusive) that has no ledger row of its own: a row in
-- scheduled_jobs for a slot always wins over a run covering it. Owned by
-- common::ledger (claim.rs writes, read.rs reads, partitions.rs expires).
CREATE TABLE decided_ranges (
    job_id          uuid        NOT NULL,
    first_at        timestamptz NOT NULL,
    last_at         timestamptz NOT NULL,
    slots           bigint      NOT NULL CHECK (slots > 0),
    job_version     bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('skipped', 'missed')),
    reason          text        NOT NULL,
    scheduler_node  text,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (first_at <= last_at),
    PRIMARY KEY (job_id, first_at)
);

-- Retention drops runs by their last slot.
CREATE INDEX decided_ranges_last_at ON decided_ranges (last_at);
