-- Operating the cluster as a team: who changed what (the audit log), and
-- alerts when a job fails, is late or goes silent.

-- Every change made through the API, written in the change's own
-- transaction: a change that rolls back leaves no entry, and none commits
-- without one. Who acted is the token's id and name (never the token);
-- what changed is `job_version` for a job (the definitions themselves are in
-- `job_changes`, so a diff is read from there, secret values masked) or
-- `details` for anything else (secret values never written).
CREATE TABLE audit_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    -- NULL for a change of the cluster itself (a namespace, a token of every namespace).
    namespace    text,
    actor_name   text        NOT NULL,
    actor_token  uuid,
    request_id   text        NOT NULL,
    action       text        NOT NULL,
    resource     text        NOT NULL,
    resource_id  text        NOT NULL,
    job_id       uuid,
    job_version  bigint,
    details      jsonb,
    reason       text        CHECK (length(reason) <= 500)
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_namespace ON audit_log (namespace, id);
CREATE INDEX audit_log_job ON audit_log (job_id, id) WHERE job_id IS NOT NULL;
CREATE INDEX audit_log_job_version ON audit_log (job_id, job_version) WHERE job_version IS NOT NULL;

-- Append-only: nothing rewrites or deletes an entry, except the retention
-- sweep, which says so for its own transaction.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('cronshard.audit_retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only (% refused)', TG_OP;
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- Where a namespace's alerts go. `url_sealed` is the address sealed with
-- the namespace's data key (a Slack incoming-webhook address is itself a
-- secret); `url_shown` is its scheme and host, for people.
CREATE TABLE alert_channels (
    id              uuid        PRIMARY KEY,
    namespace       text        NOT NULL REFERENCES namespaces (name),
    name            text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('webhook', 'slack')),
    url_sealed      text        NOT NULL,
    url_shown       text        NOT NULL,
    max_per_minute  integer     NOT NULL CHECK (max_per_minute BETWEEN 1 AND 600),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace, name)
);

-- What to watch: the jobs of a namespace chosen by id or label selector,
-- the condition, and the channels told.
CREATE TABLE alert_rules (
    id                  uuid        PRIMARY KEY,
    namespace           text        NOT NULL REFERENCES namespaces (name),
    name                text        NOT NULL,
    job_ids             uuid[],
    selector            text,
    condition           text        NOT NULL
                        CHECK (condition IN ('failed', 'consecutive_failures', 'missed', 'late', 'silent')),
    threshold           bigint,
    channels            uuid[]      NOT NULL,
    enabled             boolean     NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT now(),
    next_evaluation_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace, name),
    CHECK ((job_ids IS NULL) <> (selector IS NULL))
);
CREATE INDEX alert_rules_due ON alert_rules (next_evaluation_at) WHERE enabled;

-- A rule's view of one job: the slots judged so far (those due at or
-- before `judged_through`) and what they added up to.
CREATE TABLE alert_job_state (
    rule_id               uuid        NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    job_id                uuid        NOT NULL,
    watching_since        timestamptz NOT NULL,
    judged_through        timestamptz NOT NULL,
    consecutive_failures  integer     NOT NULL DEFAULT 0,
    last_success_at       timestamptz,
    PRIMARY KEY (rule_id, job_id)
);

-- An incident: a rule's condition held for a job from `opened_at` until
-- `resolved_at`. At most one is open per rule and job, which the unique
-- index enforces: an alert is raised once per incident.
CREATE TABLE alert_incidents (
    id           uuid        PRIMARY KEY,
    rule_id      uuid        NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    job_id       uuid        NOT NULL,
    namespace    text        NOT NULL,
    opened_at    timestamptz NOT NULL DEFAULT now(),
    opened_by    text        NOT NULL,
    summary      text        NOT NULL,
    -- The slots that made or kept it open (the first ones, at most 20).
    slots        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    resolved_at  timestamptz,
    resolution   text
);
CREATE UNIQUE INDEX alert_incidents_open ON alert_incidents (rule_id, job_id) WHERE resolved_at IS NULL;
CREATE INDEX alert_incidents_namespace ON alert_incidents (namespace, opened_at);

-- The outbox of notifications: written with the incident's change, sent
-- by a worker (one at a time per row, under its row lock), at most one of
-- each kind per incident and channel.
CREATE TABLE alert_notifications (
    id               uuid        PRIMARY KEY,
    incident_id      uuid        NOT NULL REFERENCES alert_incidents (id) ON DELETE CASCADE,
    channel_id       uuid        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('firing', 'resolved')),
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    last_status      integer,
    last_error       text,
    UNIQUE (incident_id, channel_id, kind)
);
CREATE INDEX alert_notifications_due ON alert_notifications (next_attempt_at) WHERE state = 'pending';
CREATE INDEX alert_notifications_sent ON alert_notifications (channel_id, delivered_at) WHERE state = 'delivered';
