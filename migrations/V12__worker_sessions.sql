-- The backend pid of the connection a worker heartbeats on. While that
-- session exists the worker is alive as far as its heartbeat says; once
-- Postgres has closed it (the process died: its socket closed) the worker is
-- presumed gone at once instead of after three missed heartbeats, so that
-- the messages it held, which RabbitMQ hands to another worker right away,
-- are delivered without waiting 15 s. NULL: a worker that predates this
-- column, judged by its heartbeat alone.
ALTER TABLE worker_heartbeats ADD COLUMN session_pid integer;
