//! Every line of /work/shared/CONTRACT.md, checked through the `redis` crate against a real
//! `redis-server` with the module loaded.

use model::Model;
use rng::Rng;
use testkit::client;
use testkit::harness;
use testkit::model;
use testkit::rng;

use std::collections::HashSet;
use std::time::Duration;

use client::{exists, members, ok, pexpiretime, q, scores, snapshot, sw, sw5};
use harness::{
    Server, call, call_bytes, error_line, ints, server_time_ms, start_replica, wait_in_sync,
};
use redis::{Connection, Value};

mod effects;
mod errors;
mod peek;
mod replies;

const TWO_53: i64 = 1 << 53;

/// A server with the module, and a connection to it.
fn started() -> (Server, Connection) {
    let s = Server::start();
    let c = s.client();
    (s, c)
}

/// [`started`], with the sorted set `k` holding `scores_members` (`score member ...`).
fn with_members(scores_members: &str) -> (Server, Connection) {
    let (s, mut c) = started();
    let mut zadd = vec!["ZADD", "k"];
    zadd.extend(scores_members.split(' '));
    let added: i64 = q(&mut c, &zadd);
    assert_eq!(added as usize, (zadd.len() - 2) / 2, "{}", zadd.join(" "));
    (s, c)
}

/// `line` through [`sw5`], which must admit and set `k`'s expiry `ttl` after the server's clock
/// during the call. Returns the clock after the call.
fn admit_expiring(c: &mut Connection, line: &str, ttl: i64) -> i64 {
    let t0 = server_time_ms(c);
    assert_eq!(sw5(c, line)[0], 1, "{line}");
    let t1 = server_time_ms(c);
    let at = pexpiretime(c, "k");
    assert!(t0 + ttl <= at && at <= t1 + ttl, "{t0} {at} {t1}");
    t1
}

/// A connection for keyspace events, turned on (`KEA`) on `s`; its reads wait up to 10 s.
fn keyspace_events(s: &Server) -> Connection {
    let mut con = s.client();
    client::config_set(&mut con, "notify-keyspace-events", "KEA");
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

/// Everything a call could change that the tests look at: the whole dataset's digest, and the
/// key's value and expiry.
fn state(s: &Server, con: &mut Connection, key: &str) -> (String, (Option<Vec<u8>>, i64)) {
    (s.digest(), snapshot(con, key))
}
