-- Calendars: named sets of excluded times in a namespace, referenced by jobs
-- (`spec.calendars`, by name). `spec` is the calendar as the API takes it
-- (time zone, dates, ranges, cron rules); `version` is its ETag. A calendar
-- a live job references cannot be deleted.
CREATE TABLE calendars (
    namespace   text        NOT NULL REFERENCES namespaces (name),
    name        text        NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    spec        jsonb       NOT NULL,
    version     bigint      NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);
