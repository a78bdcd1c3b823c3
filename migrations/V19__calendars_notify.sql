-- Schedulers reload calendars as soon as one changes (LISTEN), as they do
-- for jobs, instead of at their next poll: a job named a calendar created
-- moments before it, and its first slots fired past it.
CREATE FUNCTION cronshard_calendars_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cronshard_calendars', '');
    RETURN NULL;
END $$;

CREATE TRIGGER calendars_notify AFTER INSERT OR UPDATE OR DELETE ON calendars
    FOR EACH STATEMENT EXECUTE FUNCTION cronshard_calendars_notify();
