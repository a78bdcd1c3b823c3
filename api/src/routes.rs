//! Request handlers, one module per resource.

pub mod cluster;
pub mod executions;
pub mod explain;
pub mod health;
pub mod jobs;
pub mod tenancy;
