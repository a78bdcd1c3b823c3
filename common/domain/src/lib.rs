//! cronshard's domain model: what a job is and how it is validated, the
//! schedule and calendar math (time is always passed in), labels and
//! selectors, which nodes own a job, the states of a slot, the fire message
//! a worker receives, and the rules for addresses and text. No I/O: nothing
//! here connects, sleeps or reads a clock it was not given.

pub mod alert;
pub mod backfill;
pub mod calendar;
pub mod contract;
pub mod diff;
pub mod execution;
pub mod job;
pub mod labels;
pub mod message;
pub mod misfire;
pub mod netguard;
pub mod ownership;
pub mod redact;
pub mod schedule;
pub mod slot;
pub mod text;
