//! Helpers over the workspace's harness (testkit::common): a client for a test server, the scores a
//! key holds, and the most requests any window holds.
#![allow(dead_code)]

use crate::common::Server;
use slidingwindow_client::{Client, Limit, Options};

pub fn client(s: &Server) -> Client {
    let options = Options::from_urls(&[s.url()], false).expect("options");
    Client::new(&options).expect("client")
}

pub fn limit(window_s: u64, max: u64) -> Limit {
    Limit::new(window_s, max).expect("limit")
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

/// One number of `INFO slidingwindow` (Redis may prefix it with the module's name).
pub fn stat(s: &Server, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("slidingwindow")
        .query(&mut s.client())
        .expect("INFO");
    info.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name || k.strip_prefix("slidingwindow_") == Some(name))
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in INFO slidingwindow:\n{info}"))
}

/// The most of `times` that any window `(a, a + window_ms]` holds.
pub fn most_in_window(times: &[u64], window_ms: u64) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    let mut first = 0;
    let mut most = 0;
    for (i, &end) in t.iter().enumerate() {
        while t[first] + window_ms <= end {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

#[test]
fn windows_are_counted() {
    assert_eq!(most_in_window(&[], 1000), 0);
    assert_eq!(most_in_window(&[5, 1005, 2005], 1000), 1);
    assert_eq!(most_in_window(&[5, 1004, 2005], 1000), 2);
    assert_eq!(most_in_window(&[7, 7, 7, 1006], 1000), 4);
}
