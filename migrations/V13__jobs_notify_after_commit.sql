-- Job changes wake the schedulers' LISTEN connections once per statement,
-- with no payload (nobody reads it, and identical notifications of one
-- transaction are sent once), instead of once per row with the job id: a
-- batch of 1,000 creates queued 1,000 notifications for every listener.
--
-- A transaction that sets `cronshard.jobs_notify = 'after_commit'` sends none:
-- its writer announces the change itself once it has committed (the API's
-- create paths). A NOTIFY inside a transaction takes a database-wide lock
-- that is held through the commit's flush to disk, so concurrent creating
-- transactions committed one after another. Every other writer (updates
-- through the API, psql, scripts) still wakes the schedulers from here.
CREATE OR REPLACE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('cronshard.jobs_notify', true) IS DISTINCT FROM 'after_commit' THEN
        PERFORM pg_notify('cronshard_jobs', '');
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_notify ON jobs;
CREATE TRIGGER jobs_notify AFTER INSERT OR UPDATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();
