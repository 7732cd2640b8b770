//! Hostile input: a seeded fuzz run against a live server, contained panics, and clock edge cases.
//! Nothing may crash the server, touch other keys, or answer anything but an error or five integers;
//! only a panic while a save is being written stops it (rather than write a truncated value).

use testkit::client;
use testkit::harness;
use testkit::rng;

use client::{STORAGES, five, ok, q, snapshot, sw5, sw5_with};
use harness::{Server, call, error_line};
use redis::{Connection, Value};
use rng::Rng;
use std::path::{Path, PathBuf};

mod clocks;
mod fuzz;
mod panics;

const MAX_EXACT: u64 = 1 << 53;
const MAX_WINDOW: u64 = MAX_EXACT / 1000;
const MAX_ADD_PER_CALL: u64 = 100_000;

/// The contract's messages, word for word.
const BAD_WINDOW: &str =
    "ERR window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)";
const BAD_MAX: &str = "ERR max must be an integer between 1 and 9007199254740992";
const BAD_NOW: &str = "ERR now must be an integer between 0 and 9007199254740992, or *";
const BAD_COST: &str = "ERR cost must be an integer between 1 and 9007199254740992";

/// A token as an error line quotes it: printable ASCII kept, other bytes as `\xNN`, cut at 64.
fn quoted(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(64) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 64 {
        out.push_str("...");
    }
    out
}

/// Keys of every type that the fuzz and panic runs must leave exactly as they were.
const SENTINELS: [&str; 7] = [
    "sentinel:str",
    "sentinel:hash",
    "sentinel:list",
    "sentinel:set",
    "sentinel:zset",
    "sentinel:stream",
    "sentinel:window",
];

fn make_sentinels(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    let setup: [&[&str]; 7] = [
        &["SET", "sentinel:str", "value", "PX", "100000000"],
        &["HSET", "sentinel:hash", "f", "v", "g", "w"],
        &["RPUSH", "sentinel:list", "a", "b", "c"],
        &["SADD", "sentinel:set", "a", "b"],
        &[
            "ZADD",
            "sentinel:zset",
            "-inf",
            "a",
            "1.5",
            "b",
            "+inf",
            "c",
        ],
        &["XADD", "sentinel:stream", "1-1", "f", "v"],
        &[
            "SLIDINGWINDOW.ALLOW",
            "sentinel:window",
            "3600",
            "5",
            "1000",
        ],
    ];
    for c in setup {
        let v = call(con, c);
        assert!(error_line(&v).is_none(), "{c:?}: {v:?}");
    }
    sentinel_state(con)
}

fn sentinel_state(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    SENTINELS.iter().map(|k| snapshot(con, k)).collect()
}
