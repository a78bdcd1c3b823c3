-- Day partitions are vacuumed as they are written, unthrottled: every slot
-- leaves two dead row versions (claimed, started, finished; none of those
-- updates can be HOT, the status is indexed), and the sweeps for pending and
-- running rows walk their index entries until a vacuum removes them. New
-- partitions get these settings when maintenance creates them
-- (common::ledger::partitions, VACUUM_SETTINGS); this gives them to the
-- partitions that exist already.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'scheduled_jobs'::regclass AND c.relname <> 'scheduled_jobs_default'
    LOOP
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0)',
                       part.relname);
    END LOOP;
END $$;
