//! The compact storage (`slidingwindow.storage compact`): the same replies as a sorted set for the
//! same calls, and its keyspace events and WATCH (`replies`); a few bytes a request, lazy free and
//! defrag (`memory`); persistence and movement: RDB, AOF rewrite, DUMP/RESTORE, COPY, RENAME, a
//! replica (`persistence`); CONVERT both ways and APPLY (`commands`); corrupt payloads refused, the
//! golden RDB of encoding 1 and the DUMP fixtures of earlier layouts (`encoding`); counts past
//! 2^32 and up to 2^53 on one timestamp, and DUMPs that cost distinct timestamps (`counts`). Replication,
//! kill -9 and the cluster run in the `faults`, `concurrency`, `hostile` and `cluster` suites once
//! per storage.

use testkit::client;
use testkit::harness;
use testkit::model;
use testkit::rng;

use client::{Events, info_u64, ok, pexpiretime, q, scores, snapshot, sw, sw5};
use harness::{Server, call, error_line, server_time_ms, start_replica, wait_in_sync, wait_until};
use model::{Expiry, Model};
use redis::{Connection, Value};
use rng::Rng;
use std::time::Duration;

mod commands;
mod counts;
mod encoding;
mod memory;
mod persistence;
mod replies;

const T0: u64 = 1_700_000_000_000;
const MAX_TS: u64 = 1 << 53;

fn compact_server() -> Server {
    Server::builder().storage("compact").start()
}

/// A compact server that appends every write to its AOF, rewritten without the RDB preamble
/// (compact logs as `APPLY` batches).
fn aof_server() -> Server {
    Server::builder()
        .storage("compact")
        .aof_always()
        .args(["--aof-use-rdb-preamble", "no"])
        .start()
}

/// Runs `BGREWRITEAOF` on `s` and waits until it is done.
fn rewrite_aof(s: &Server, c: &mut Connection) {
    let rewrites = info_u64(s, "persistence", "aof_rewrites");
    let started: String = q(c, &["BGREWRITEAOF"]);
    assert_eq!(started, "Background append only file rewriting started");
    wait_until(Duration::from_secs(60), "the AOF rewrite", || {
        info_u64(s, "persistence", "aof_rewrites") > rewrites
            && info_u64(s, "persistence", "aof_rewrite_in_progress") == 0
    });
}

/// Lets one call add up to 10^7 requests (the highest `max-members-per-call`).
fn wide_calls(c: &mut Connection) {
    client::config_set(c, "slidingwindow.max-members-per-call", "10000000");
}

/// [`compact_server`] and a connection to it.
fn compact_client() -> (Server, Connection) {
    let s = compact_server();
    let c = s.client();
    (s, c)
}

/// The key's TYPE.
fn kind(con: &mut Connection, key: &str) -> String {
    q(con, &["TYPE", key])
}

/// PEEK answers at a few moments and costs: what a key's log means to a caller.
fn peeks(con: &mut Connection, key: &str) -> Vec<[i64; 5]> {
    let mut out = Vec::new();
    for now in [T0, T0 + 30_000, T0 + 3_600_000, T0 + 90_000_000] {
        for (w, max, cost) in [(3600, 10, 1), (60, 3, 2), (86_400, 1000, 7)] {
            out.push(sw5(con, &format!("PEEK {key} {w} {max} {now} COST {cost}")));
        }
    }
    out
}

/// Random admissions and trims on `keys`, with hour-long windows.
fn traffic(c: &mut Connection, keys: &[&str], seed: u64, calls: usize) {
    let mut rng = Rng::new(seed);
    let mut now = T0;
    for _ in 0..calls {
        now = match rng.range(0, 19) {
            0 => now + rng.range(1 << 32, 1 << 33),
            1 => now.saturating_sub(rng.range(0, 60_000)),
            _ => now + rng.range(0, 20_000),
        };
        let key = rng.pick(keys);
        let (max, cost) = (rng.range(5, 40), rng.range(1, 4));
        let reply = sw(c, &format!("ALLOW {key} 3600 {max} {now} COST {cost}"));
        assert!(error_line(&reply).is_none(), "{reply:?}");
    }
}
