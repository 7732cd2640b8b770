//! A test's side of the conversation over the shared harness: typed queries, raw pipelines,
//! INFO numbers, key snapshots, and replicas attached while traffic runs.
#![allow(dead_code)]

use crate::harness::{self, Server, error_line, wait_until};
use redis::{Connection, ConnectionLike, FromRedisValue, Value};
use std::time::Duration;

/// Runs a command that must succeed and converts its reply (on a server or a whole cluster).
pub fn q<T: FromRedisValue>(con: &mut impl ConnectionLike, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{} failed: {e}", args.join(" ")))
}

/// Runs a command that answers `+OK`, and checks that it did.
pub fn ok(con: &mut impl ConnectionLike, args: &[&str]) {
    let reply: String = q(con, args);
    assert_eq!(reply, "OK", "{}", args.join(" "));
}

/// `CONFIG SET name value`, which must answer `+OK`.
pub fn config_set(con: &mut impl ConnectionLike, name: &str, value: impl ToString) {
    ok(con, &["CONFIG", "SET", name, &value.to_string()]);
}

/// `CONFIG GET name`'s value ("" when the server has no such config).
pub fn config_get(con: &mut impl ConnectionLike, name: &str) -> String {
    let pairs: std::collections::HashMap<String, String> = q(con, &["CONFIG", "GET", name]);
    pairs.get(name).cloned().unwrap_or_default()
}

/// `CONFIG SET name value`'s error line, checked to be one.
pub fn config_refused(con: &mut Connection, name: &str, value: &str) -> String {
    let v = harness::call(con, &["CONFIG", "SET", name, value]);
    error_line(&v).unwrap_or_else(|| panic!("CONFIG SET {name} {value}: {v:?}"))
}

/// A connection authenticated as `user` (password `pw`).
pub fn client_as(s: &Server, user: &str) -> Connection {
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", s.port());
    let con = redis::Client::open(url)
        .expect("url")
        .get_connection()
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    con.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    con
}

/// The code of an error reply (`NOPERM`, `ERR`, ...); panics if the reply is not an error.
pub fn error_code(v: &Value) -> String {
    let e = error_line(v).unwrap_or_else(|| panic!("expected an error, got {v:?}"));
    e.split(' ').next().unwrap_or_default().to_string()
}

/// `SLIDINGWINDOW.<cmd> key window max now`, the words before a call's options.
pub fn head_words(
    cmd: &str,
    key: &str,
    (window_s, max): (u64, u64),
    now: impl ToString,
) -> Vec<String> {
    vec![
        format!("SLIDINGWINDOW.{cmd}"),
        key.to_string(),
        window_s.to_string(),
        max.to_string(),
        now.to_string(),
    ]
}

/// `SLIDINGWINDOW.<cmd> key window max now COST cost` as a command line.
pub fn sw_line(cmd: &str, key: &str, window_s: u64, max: u64, now: u64, cost: u64) -> Vec<String> {
    let mut line = head_words(cmd, key, (window_s, max), now);
    line.extend(["COST".to_string(), cost.to_string()]);
    line
}

/// Runs `SLIDINGWINDOW.<line>`, the line split on spaces (e.g. `"ALLOW k 10 3 1000"`).
pub fn sw(con: &mut Connection, line: &str) -> Value {
    let full = format!("SLIDINGWINDOW.{line}");
    let args: Vec<&str> = full.split(' ').collect();
    harness::call(con, &args)
}

/// Runs `SLIDINGWINDOW.<line>`, which must answer exactly five integers.
pub fn sw5(con: &mut Connection, line: &str) -> [i64; 5] {
    let v = sw(con, line);
    five(&v).unwrap_or_else(|| panic!("{line} answered {v:?}, not five integers"))
}

/// One `SLIDINGWINDOW.<cmd> key window max now COST cost` call that must answer five integers.
pub fn sw5_with(
    con: &mut Connection,
    cmd: &str,
    key: &str,
    w: u64,
    max: u64,
    now: u64,
    cost: u64,
) -> [i64; 5] {
    let line = sw_line(cmd, key, w, max, now, cost);
    let v = harness::call_words(con, &line);
    five(&v).unwrap_or_else(|| panic!("{} answered {v:?}, not five integers", line.join(" ")))
}

/// The reply as five integers, or None if it is anything else.
pub fn five(v: &Value) -> Option<[i64; 5]> {
    match v {
        Value::Array(items) if items.len() == 5 => {
            let mut out = [0i64; 5];
            for (slot, item) in out.iter_mut().zip(items) {
                match item {
                    Value::Int(n) => *slot = *n,
                    _ => return None,
                }
            }
            Some(out)
        }
        _ => None,
    }
}

/// A `DETAIL` reply (CONTRACT.md "Every limit's state"): its six integers, each limit's four
/// (`count_i`, `remaining_i`, `retry_i`, `reset_i`), and the `now` the call used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detailed {
    pub head: Vec<i64>,
    pub limits: Vec<[i64; 4]>,
    pub now: i64,
}

/// The reply as a `DETAIL` reply; panics (showing it) on any other shape.
pub fn detailed(v: &Value) -> Detailed {
    let int = |v: &Value| match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?} in {v:?}"),
    };
    let Value::Array(items) = v else {
        panic!("expected the eight elements of DETAIL, got {v:?}");
    };
    let [head @ .., Value::Array(limits), now] = &items[..] else {
        panic!("expected the eight elements of DETAIL, got {v:?}");
    };
    assert_eq!(items.len(), 8, "{v:?}");
    let limits = limits
        .iter()
        .map(|l| match l {
            Value::Array(four) if four.len() == 4 => {
                [int(&four[0]), int(&four[1]), int(&four[2]), int(&four[3])]
            }
            other => panic!("expected a limit's four integers, got {other:?} in {v:?}"),
        })
        .collect();
    Detailed {
        head: head.iter().map(int).collect(),
        limits,
        now: int(now),
    }
}

/// Encodes one command (binary-safe) in the wire format.
pub fn packed<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends many commands in one write and reads one raw reply each (errors come back as values).
pub fn pipeline<A: AsRef<[u8]>>(con: &mut Connection, cmds: &[Vec<A>]) -> Vec<Value> {
    let mut buf = Vec::new();
    for c in cmds {
        buf.extend_from_slice(&packed(c));
    }
    con.send_packed_command(&buf).expect("send pipeline");
    (0..cmds.len())
        .map(|_| con.recv_response().expect("read pipelined reply"))
        .collect()
}

/// A numeric INFO field; panics if it is missing or not a number.
pub fn info_u64(s: &Server, section: &str, field: &str) -> u64 {
    let v = s
        .info_field(section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"));
    v.parse()
        .unwrap_or_else(|_| panic!("INFO {field} is not a number: {v}"))
}

/// The two storages a log can live in; suites that hold for both run once per storage.
pub const STORAGES: [&str; 2] = ["zset", "compact"];

/// For each of `STORAGES` in turn: a fresh server that creates keys in it, and a connection.
pub fn on_each_storage() -> impl Iterator<Item = (&'static str, Server, Connection)> {
    STORAGES.into_iter().map(|storage| {
        let s = Server::builder().storage(storage).start();
        let c = s.client();
        (storage, s, c)
    })
}

/// Every timestamp `key` logs, ascending, whatever its storage: a sorted set's scores (all
/// integral in these tests), or a compact log's, decoded from its `DUMP` (read-only, so it works
/// on replicas too).
pub fn scores(con: &mut impl ConnectionLike, key: &str) -> Vec<u64> {
    let kind: String = q(con, &["TYPE", key]);
    if kind != "swcompact" {
        return members(con, key).into_iter().map(|(_, s)| s).collect();
    }
    let dump: Vec<u8> = q(con, &["DUMP", key]);
    crate::dump::compact_timestamps(&dump)
        .unwrap_or_else(|| panic!("{key}: a DUMP that is no compact log"))
}

/// Every member of the sorted set at `key` with its score, oldest first.
pub fn members(con: &mut impl ConnectionLike, key: &str) -> Vec<(String, u64)> {
    let pairs: Vec<(String, f64)> = q(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    pairs
        .into_iter()
        .map(|(m, s)| {
            assert!(
                s.fract() == 0.0 && s >= 0.0,
                "{key}: member {m} has score {s}, not a ms timestamp"
            );
            (m, s as u64)
        })
        .collect()
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    q::<i64>(con, &["EXISTS", key]) == 1
}

pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    q(con, &["PEXPIRETIME", key])
}

/// What a key holds, byte for byte, with its absolute expiry: equal before and after means untouched.
pub fn snapshot(con: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let dump: Option<Vec<u8>> = q(con, &["DUMP", key]);
    (dump, pexpiretime(con, key))
}

/// Waits for a background save or rewrite: polls `field` in INFO persistence until it is 0.
pub fn wait_persistence_idle(s: &Server, field: &str) {
    wait_until(Duration::from_secs(30), &format!("{field}:0"), || {
        info_u64(s, "persistence", field) == 0
    });
}

/// Keyspace events of one key on one server (turned on with `KEA`), read up to a marker that the
/// test publishes on channel `marker` after each step. Subscribed with plain commands so the
/// subscription lives as long as the connection; an event that never comes fails in 10 s.
pub struct Events {
    con: Connection,
}

impl Events {
    pub fn watch(s: &Server, key: &str) -> Events {
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "notify-keyspace-events", "KEA"])
            .query(&mut s.client())
            .unwrap();
        let mut con = s.client();
        con.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let channel = format!("__keyspace@0__:{key}");
        con.send_packed_command(&packed(&["SUBSCRIBE", &channel, "marker"]))
            .unwrap();
        for _ in 0..2 {
            con.recv_response().expect("subscription confirmed");
        }
        Events { con }
    }

    /// The events seen before `marker` arrives.
    pub fn until(&mut self, marker: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let msg: Vec<String> =
                redis::from_redis_value(self.con.recv_response().expect("pubsub message")).unwrap();
            let [kind, channel, payload] = &msg[..] else {
                panic!("not a pubsub message: {msg:?}");
            };
            assert_eq!(kind, "message");
            if channel == "marker" {
                assert_eq!(payload, marker, "markers out of order");
                return seen;
            }
            seen.push(payload.clone());
        }
    }
}
