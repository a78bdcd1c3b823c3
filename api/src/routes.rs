//! Request handlers, one module per resource.

pub mod alerts;
pub mod audit;
pub mod backfills;
pub mod calendars;
pub mod cluster;
pub mod completion;
pub mod executions;
pub mod explain;
pub mod health;
pub mod jobs;
pub mod schedules;
pub mod signing_keys;
pub mod stats;
pub mod tenancy;
