-- A job's key: a name its team chooses (a DNS label, like a Kubernetes
-- object's name), unique among the live jobs of its namespace, by which the
-- API, the CLI, the console and a folder of job files address it. Optional:
-- jobs made without one keep only their id. A deleted job keeps its key, so
-- its history stays reachable by it, and frees it for a new job.
ALTER TABLE jobs ADD COLUMN key text
    CHECK (key ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$');

CREATE UNIQUE INDEX jobs_live_key ON jobs (namespace, key) WHERE deleted_at IS NULL AND key IS NOT NULL;

-- A bare key is looked up across the caller's namespaces, deleted jobs too.
CREATE INDEX jobs_key ON jobs (key) WHERE key IS NOT NULL;
