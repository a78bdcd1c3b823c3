-- Every version a job has had, and from which instant it was in force. A
-- change applies to the slots due at or after the instant it was made (its
-- transaction's start, the `updated_at` it stamps); a slot due earlier keeps
-- the version it was claimed under, even when a worker only gets to it after
-- the change. Without this history a worker that meets a row claimed under
-- version v while the job is at v+2 cannot tell whether the slot belonged to
-- v (both changes came after it: deliver) or to v+1 (cancel, and let the
-- version in force re-take it).
--   state  'live' | 'paused' | 'deleted': what the version does with its slots
--   spec   the version's definition: whether it fires at a slot whose claim
--          an older version made is decided with it
CREATE TABLE job_changes (
    job_id      uuid        NOT NULL,
    version     bigint      NOT NULL,
    valid_from  timestamptz NOT NULL,
    state       text        NOT NULL CHECK (state IN ('live', 'paused', 'deleted')),
    spec        jsonb       NOT NULL,
    PRIMARY KEY (job_id, version)
);

-- Written by the database itself, so no writer of `jobs` can forget it.
CREATE FUNCTION jobs_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.version <> OLD.version THEN
        INSERT INTO job_changes (job_id, version, valid_from, state, spec)
        VALUES (NEW.id, NEW.version, coalesce(NEW.updated_at, now()),
                CASE WHEN NEW.deleted_at IS NOT NULL THEN 'deleted'
                     WHEN NEW.paused THEN 'paused' ELSE 'live' END, NEW.spec)
        ON CONFLICT (job_id, version) DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_record_change AFTER INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_record_change();

INSERT INTO job_changes (job_id, version, valid_from, state, spec)
SELECT id, version, updated_at,
       CASE WHEN deleted_at IS NOT NULL THEN 'deleted' WHEN paused THEN 'paused' ELSE 'live' END, spec
FROM jobs
ON CONFLICT DO NOTHING;

-- When a `retrying` row's next attempt is due (set with the status by the
-- worker that scheduled the retry): the stranded-row sweep finds a retry
-- whose message was lost by this instant plus its grace.
ALTER TABLE scheduled_jobs ADD COLUMN next_attempt_at timestamptz;

-- `updated_at` is the instant a version comes into force, so it must never
-- go back: a transaction that started before another one's change but
-- updated the job after it would otherwise bring a later version into
-- force before an earlier one.
CREATE OR REPLACE FUNCTION jobs_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id()::text::bigint;
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := greatest(now(), OLD.updated_at + interval '1 microsecond');
    END IF;
    RETURN NEW;
END $$;

-- Rows cancelled because a change came before their slot: the version in
-- force at the slot re-takes them. The sweep that makes sure it did (when
-- the owners that were to do it died) reads them through this index.
CREATE INDEX scheduled_jobs_cancelled_by_change ON scheduled_jobs (scheduled_at)
    WHERE status = 'skipped' AND reason IN ('superseded', 'paused');
