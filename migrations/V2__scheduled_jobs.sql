-- The per-occurrence ledger: one row per slot that was due, whatever became of
-- it. Range-partitioned by the UTC day of the scheduled time into
-- scheduled_jobs_yyyymmdd; partitions are created ahead and dropped after the
-- retention by the maintenance task (common::partitions).
CREATE TABLE scheduled_jobs (
    job_id          uuid        NOT NULL,
    scheduled_at    timestamptz NOT NULL,
    fire_id         uuid        NOT NULL,
    execution_id    text        NOT NULL,
    trigger         text        NOT NULL DEFAULT 'schedule'
                    CHECK (trigger IN ('schedule', 'manual', 'misfire')),
    status          text        NOT NULL
                    CHECK (status IN ('pending', 'running', 'retrying', 'succeeded',
                                      'failed', 'skipped', 'missed')),
    attempts        integer     NOT NULL DEFAULT 0,
    scheduler_node  text,
    worker_id       text,
    fired_at        timestamptz,
    published_at    timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    http_status     integer,
    sqs_message_id  text,
    response_excerpt text,
    error           text,
    -- Why a slot was skipped or missed (paused, deleted, superseded, misfire policy).
    reason          text,
    job_version     bigint,
    PRIMARY KEY (job_id, scheduled_at)
) PARTITION BY RANGE (scheduled_at);

-- Catches a slot whose day has no partition yet, so a claim can never fail for
-- lack of one. Maintenance moves such rows into the day partition it creates.
CREATE TABLE scheduled_jobs_default PARTITION OF scheduled_jobs DEFAULT;

-- The outbox sweeper looks for claimed rows whose publish was never confirmed.
CREATE INDEX scheduled_jobs_unpublished ON scheduled_jobs (fired_at)
    WHERE status = 'pending' AND published_at IS NULL;
CREATE INDEX scheduled_jobs_status ON scheduled_jobs (status, scheduled_at);
