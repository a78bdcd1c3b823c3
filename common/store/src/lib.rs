//! cronshard's Postgres store. One module owns each table's SQL: the ledger
//! of slots (`scheduled_jobs`, partitioned by day) in [`ledger`], jobs and
//! their versions (`jobs`, `job_changes`) in [`jobs`], calendars in
//! [`calendars`], data keys of sealed secrets in [`secrets`], the namespaces'
//! signing keys in [`signing_keys`]. The store never
//! talks to the broker: a row that is to be published is returned to the
//! caller, and the broker's outbox publishes it after the commit.

pub mod alerts;
pub mod audit;
pub mod backfills;
pub mod calendars;
pub mod completion;
pub mod db;
pub mod heartbeats;
pub mod jobs;
pub mod ledger;
pub mod notify;
pub mod secrets;
pub mod selector;
pub mod signing_keys;
