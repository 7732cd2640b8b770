//! Helpers over the workspace's harness (testkit::harness): a client for a test server, the scores a
//! key holds, and the most requests any window holds.
#![allow(dead_code)]

use crate::harness::Server;
use slidingwindow_client::{Backend, Client, Limit, Options};
#[allow(unused_imports)]
pub use testkit::probe::{command_calls, most_in_window, stat};

pub fn client(s: &Server) -> Client {
    client_at(&s.url())
}

/// A client for the server at `url`.
pub fn client_at(url: &str) -> Client {
    let options = Options::from_urls(&[url.to_string()], false).expect("options");
    Client::new(&options).expect("client")
}

/// A client of `s` on `backend`.
pub fn client_on(s: &Server, backend: Backend) -> Client {
    let options = Options::from_urls(&[s.url()], false).expect("options");
    Client::new(&options.backend(backend)).expect("client")
}

/// The two paths a test runs on: a server with the module (storage `zset` or `compact`), and
/// one that cannot load it (`enable-module-command no`, no module) for the script, each with a
/// client choosing its backend itself; the path's name.
pub fn paths(storages: &[&'static str]) -> Vec<(&'static str, Server)> {
    let mut out: Vec<(&'static str, Server)> = storages
        .iter()
        .map(|&st| (st, Server::builder().storage(st).start()))
        .collect();
    out.push(("script", Server::start_without_module()));
    out
}

pub fn limit(window_s: u64, max: u64) -> Limit {
    Limit::new(window_s, max).expect("limit")
}

/// The shared lease scenarios, `spec/leases.json`.
pub fn lease_spec() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../spec/leases.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("spec/leases.json")
}

/// A lease scenario's key with `{t}` replaced by `tag`, and its limits.
pub fn scenario(sc: &serde_json::Value, tag: &str) -> (String, Vec<Limit>) {
    let key = sc["key"].as_str().unwrap().replace("{t}", tag);
    let limits = sc["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| limit(l[0].as_u64().unwrap(), l[1].as_u64().unwrap()))
        .collect();
    (key, limits)
}

/// Every score `key` holds, sorted (a compact key is converted to a sorted set first).
pub fn logged(s: &Server, key: &str) -> Vec<u64> {
    let mut con = s.client();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query(&mut con)
        .expect("EXISTS");
    if exists == 0 {
        return Vec::new();
    }
    // One transaction, so that the count CONVERT answers is the set ZRANGE reads.
    let (converted, scored): (usize, Vec<(String, f64)>) = redis::pipe()
        .atomic()
        .cmd("SLIDINGWINDOW.CONVERT")
        .arg(key)
        .arg("zset")
        .cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .expect("CONVERT, ZRANGE");
    assert_eq!(scored.len(), converted, "{key}: every logged request read");
    let mut scores: Vec<u64> = scored.into_iter().map(|(_, s)| s as u64).collect();
    scores.sort_unstable();
    scores
}

/// Requests in `key`'s window as PEEK counts them (a lease's permits, logged at its end, count).
/// A cost above max is never admitted, so the count is the log's as it is.
pub fn counted(s: &Server, key: &str, window_s: u64) -> u64 {
    let reply: Vec<i64> = redis::cmd("SLIDINGWINDOW.PEEK")
        .arg(key)
        .arg(window_s)
        .arg(1)
        .arg("*")
        .arg("COST")
        .arg(2)
        .query(&mut s.client())
        .expect("PEEK");
    reply[1] as u64
}

/// Polls `cond` (without blocking the runtime) until it holds; panics naming `what` after 30 s.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
