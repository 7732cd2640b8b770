//! A typed async client for the slidingwindow module (`SLIDINGWINDOW.ALLOW`, `PEEK`, `ALLOWALL`,
//! `PEEKALL`, `REFUND`, with `COST`, `LIMIT`, `LEASE` and `DETAIL`) over the `redis` crate, one
//! node or a cluster, and a lease object that hands out permits from memory without ever
//! admitting more than a limit allows. See README.md.

mod batch;
mod client;
mod connect;
mod error;
mod error_log;
mod lease;
mod limit;
mod reply;
mod request;

pub use batch::{Answer, Batch};
pub use client::Client;
pub use connect::{Options, Topology};
pub use error::Error;
pub use error_log::ErrorLog;
pub use lease::{Charge, Clock, Lease, LeaseConfig, LeaseReply, Source, Stats};
pub use limit::{Limit, MAX_EXACT, MAX_KEYS, MAX_LIMITS, MAX_WINDOW_SECONDS, Now, unix_ms};
/// The redis crate this one is built on, for callers that need its types (`Cmd`, `Value`).
pub use redis;
pub use reply::{Detail, LimitState, Reply, RetryAfter};
pub use request::{Call, Check, CheckAll, Keyed, Refund};
