-- Live workers. A worker refreshes its row every few seconds and deletes it
-- when it stops. The stuck-`running` sweep recovers a row only when the
-- worker named on it has not been seen recently: a live worker may hold a
-- row `running` for long (armed ahead of its due instant, or queued behind
-- its in-flight limit in a burst), and delivering it again elsewhere would
-- be a duplicate.
CREATE TABLE worker_heartbeats (
    worker_id text        PRIMARY KEY,
    seen_at   timestamptz NOT NULL DEFAULT now()
);
