-- Asynchronous completion (docs/schedules.md, "Asynchronous completion"):
-- a delivery a receiver answered 202 stays `running` until the receiver
-- reports its outcome or this deadline passes. Set only while the attempt
-- awaits its report; the sweeps that take back or recover `running` rows
-- leave such rows alone (no worker holds them).
ALTER TABLE scheduled_jobs ADD COLUMN awaiting_until timestamptz;
