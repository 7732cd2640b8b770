//! A key's logged scores, read while a load runs (issue 35's fleet tests): every 50 ms one
//! MULTI with Redis's TIME and the key's scores (a compact key converted to a sorted set and back
//! inside it). A member scored `s` is in the key from its call until a call at `s + W` or later
//! trims it (every call the gateway makes is `*`), so the last poll at a Redis time in
//! `[s, s + W)` holds every request logged at `s`, less those taken back by then (a lease's
//! unused permits go back at its end, `s`). Reading the key only after the run would find the
//! last window alone; a longer window kept for the count would change what the calls trim.

use crate::harness::{STARTUP_DEADLINE, Server, wait_until};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// One poll: Redis's time (ms) and how many members each score has.
type Poll = (u64, BTreeMap<u64, u64>);

pub struct Poller {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Poll>>,
    con: redis::Connection,
    key: String,
    compact: bool,
}

fn poll(con: &mut redis::Connection, key: &str, compact: bool) -> Option<Poll> {
    if compact {
        // CONVERT of a missing key is an error: nothing to read.
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(con).ok()?;
        if exists == 0 {
            let (s, us): (u64, u64) = redis::cmd("TIME").query(con).ok()?;
            return Some((s * 1000 + us / 1000, BTreeMap::new()));
        }
    }
    let mut p = redis::pipe();
    p.atomic().cmd("TIME");
    if compact {
        p.cmd("SLIDINGWINDOW.CONVERT").arg(key).arg("zset").ignore();
    }
    p.cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES");
    if compact {
        p.cmd("SLIDINGWINDOW.CONVERT")
            .arg(key)
            .arg("compact")
            .ignore();
    }
    // The key may have expired since EXISTS: that poll is skipped.
    let ((s, us), scored): ((u64, u64), Vec<(String, u64)>) = p.query(con).ok()?;
    let mut counts = BTreeMap::new();
    for (_, score) in scored {
        *counts.entry(score).or_insert(0) += 1;
    }
    Some((s * 1000 + us / 1000, counts))
}

impl Poller {
    pub fn start(redis: &Server, key: &str, compact: bool) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, mut con, k) = (stop.clone(), redis.client(), key.to_string());
        let thread = std::thread::spawn(move || {
            let mut polls = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                polls.extend(poll(&mut con, &k, compact));
                std::thread::sleep(Duration::from_millis(50));
            }
            polls
        });
        Poller {
            stop,
            thread,
            con: redis.client(),
            key: key.to_string(),
            compact,
        }
    }

    /// Stops, then polls until Redis's time has reached every score (a lease's permits are
    /// logged at its end, up to its duration after the load stopped). Every score logged, as
    /// many times as it was logged and kept, sorted.
    pub fn finish(self, window_ms: u64) -> Vec<u64> {
        self.finish_counted(window_ms).0
    }

    /// [`Poller::finish`], and the most distinct scores the key held in any poll.
    pub fn finish_counted(mut self, window_ms: u64) -> (Vec<u64>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let mut polls = self.thread.join().expect("the poller");
        wait_until(
            STARTUP_DEADLINE,
            "Redis's clock past every score",
            || match poll(&mut self.con, &self.key, self.compact) {
                Some(p) => {
                    let done = p.1.keys().all(|&s| s <= p.0);
                    polls.push(p);
                    done
                }
                None => false,
            },
        );
        let distinct = polls.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
        (scores(&polls, window_ms), distinct)
    }
}

/// For each score `s`, the count of the last poll at a Redis time in `[s, s + window_ms)`; every
/// score must have one, or the measurement is incomplete.
fn scores(polls: &[Poll], window_ms: u64) -> Vec<u64> {
    let seen: std::collections::BTreeSet<u64> =
        polls.iter().flat_map(|(_, c)| c.keys().copied()).collect();
    let mut out = Vec::new();
    for s in seen {
        let (_, last) = polls
            .iter()
            .rev()
            .find(|(t, _)| s <= *t && *t < s + window_ms)
            .unwrap_or_else(|| panic!("no poll within the window of score {s}: incomplete"));
        out.extend(std::iter::repeat_n(s, *last.get(&s).unwrap_or(&0) as usize));
    }
    out
}
