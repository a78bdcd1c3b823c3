-- Day partitions fill their pages to 70% with claims, so a slot's two
-- updates (started, finished) can fit on the page of its claim: one page
-- touched and a short WAL record per update instead of a second page and a
-- logged lock of the old version. New partitions get this from maintenance
-- (common::ledger::partitions, PAGE_SETTINGS); this gives it to the
-- partitions that exist already, for the pages they write from now on.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'scheduled_jobs'::regclass AND c.relname <> 'scheduled_jobs_default'
    LOOP
        EXECUTE format('ALTER TABLE %I SET (fillfactor = 70)', part.relname);
    END LOOP;
END $$;
