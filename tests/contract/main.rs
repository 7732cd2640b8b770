//! Every line of /work/shared/CONTRACT.md, checked through the `redis` crate against a real
//! `redis-server` with the module loaded.

use model::Model;
use rng::Rng;
use testkit::common;
use testkit::kit;
use testkit::model;
use testkit::rng;

use std::collections::HashSet;
use std::time::Duration;

use common::{
    Server, call, call_bytes, error_line, ints, server_time_ms, start_replica, wait_in_sync,
};
use kit::{exists, members, pexpiretime, q, scores, snapshot, sw, sw5};
use redis::{Connection, Value};

mod effects;
mod errors;
mod peek;
mod replies;

const TWO_53: i64 = 1 << 53;

/// Everything a call could change that the tests look at: the whole dataset's digest, and the
/// key's value and expiry.
fn state(s: &Server, con: &mut Connection, key: &str) -> (String, (Option<Vec<u8>>, i64)) {
    (s.digest(), snapshot(con, key))
}
