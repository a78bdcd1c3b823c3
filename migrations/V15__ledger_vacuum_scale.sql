-- Day partitions are vacuumed at 5% dead row versions instead of 1%: every
-- vacuum walks each index of the partition whole, so the index work per dead
-- version is about 1 / the scale factor, and at 1% the vacuums of a busy
-- day's partition took half of Postgres's time (measured at 5,000 fires/s).
-- New partitions get this from maintenance (common::ledger::partitions,
-- VACUUM_SETTINGS); this gives it to the partitions that exist already.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'scheduled_jobs'::regclass AND c.relname <> 'scheduled_jobs_default'
    LOOP
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.05)', part.relname);
    END LOOP;
END $$;
