// The README is the crate's documentation: its examples compile as doctests.
#![doc = include_str!("../README.md")]

#[macro_use]
mod setters;

mod batch;
mod client;
mod connect;
mod error;
mod error_log;
mod inflight;
mod lease;
mod lease_map;
mod limit;
mod lru;
mod refusal;
mod reply;
mod request;
mod script;
mod sentinel;
mod settle;
mod top;

pub use batch::{Answer, Batch};
pub use client::Client;
pub use connect::{Auth, Options, Topology};
pub use error::Error;
pub use error_log::ErrorLog;
pub use inflight::{Reservation, Settlement, Slot};
pub use lease::{
    Charge, Clock, Lease, LeaseConfig, LeaseReply, Pending, RefundHook, Source, Stats, Take, late,
};
pub use lease_map::{LeaseMap, LeaseMapConfig, MapStats, give_back_all};
pub use limit::{
    Limit, MAX_EXACT, MAX_KEYS, MAX_LIMITS, MAX_WINDOW_SECONDS, Now, logged_score, unix_ms,
};
pub use lru::Lru;
/// The redis crate this one is built on, for callers that need its types (`Cmd`, `Value`).
pub use redis;
pub use reply::{Detail, LimitState, Reply, RetryAfter};
pub use request::{Call, Check, CheckAll, Keyed, Refund};
pub use script::{Backend, SCRIPT};
pub use settle::{Leasable, Ledger, OnRefusal, Pass, Permit, Stopped};
pub use top::TopEntry;
