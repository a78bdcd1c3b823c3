-- Job definitions. Deletes are tombstones (deleted_at) so that the change feed
-- can tell every scheduler about them; the API hides deleted rows.
CREATE TABLE jobs (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    spec        jsonb       NOT NULL,
    paused      boolean     NOT NULL DEFAULT false,
    version     bigint      NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz,
    -- Transaction id of the last write. The change feed polls
    -- `change_xid >= xmin of its previous snapshot`, which (unlike an
    -- `updated_at > watermark` poll) cannot skip a transaction that commits
    -- after a later one.
    change_xid  bigint      NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)
);

CREATE INDEX jobs_change_xid ON jobs (change_xid);
CREATE INDEX jobs_live_created ON jobs (created_at, id) WHERE deleted_at IS NULL;

CREATE FUNCTION jobs_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id()::text::bigint;
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER jobs_touch BEFORE INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_touch();

-- Wakes every scheduler's LISTEN connection; the payload is the job id. The
-- periodic poll is the safety net when a notification is lost.
CREATE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cronshard_jobs', NEW.id::text);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify AFTER INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_notify();
