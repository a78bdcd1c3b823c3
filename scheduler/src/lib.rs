//! The scheduler node.
//!
//! A node is a pipeline of loops (see `node.rs`):
//! - **membership**: heartbeat into every Redis shard (30 s TTL), refresh the
//!   live set (union over shards) → a watch channel;
//! - **feed**: full load, then LISTEN/NOTIFY plus an xid-watermark poll →
//!   job changes;
//! - **core** (`core.rs`, no I/O): ownership by rendezvous hashing (RF 2,
//!   `domain::ownership`) →
//!   a min-heap of owned jobs → due slots in batches, ahead of time by a
//!   lookahead that grows for bursts (`lookahead.rs`), and the catch-up of
//!   misfires and earlier versions;
//! - **dispatcher**: Redis lock → ledger claim → publish with confirms; also
//!   verifies slots whose lock it lost and sweeps the outbox;
//! - **maintenance**: ledger day partitions;
//! - **alerts** and **backfills** (`alerts.rs`, `backfill.rs`): work any node
//!   takes from Postgres one item at a time (row locks with SKIP LOCKED).
//!
//! The worker, which delivers what the nodes publish, is its own crate
//! (`cronshard-worker`).

pub mod alerts;
pub mod backfill;
pub mod core;
pub mod dispatch;
pub mod feed;
pub mod lookahead;
pub mod membership;
pub mod misfire;
pub mod node;
pub mod timer;
