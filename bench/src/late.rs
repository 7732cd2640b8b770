//! The `late` workload: one hot key with a 1-day window and LOGGED requests already logged,
//! then callers on time (appends) and callers 1 s, 1 min, 5 min and 25 min behind the clock, whose
//! requests land inside the log. In-command time of each kind, on each storage.

use redis::{Connection, Value};

use crate::Result;
use crate::info;
use crate::members::Members;
use crate::worst::logged;

/// Requests in the log before the measured calls.
pub const LOGGED: u64 = 2_000_000;
pub const WINDOW_S: u64 = 86_400;
/// Never binds: every call is admitted and logged, wherever its time falls.
const MAX: u64 = 1 << 40;
/// One request every 40 ms: LOGGED span 22.2 hours, all inside the window.
pub const STEP_MS: u64 = 40;
const FIRST_MS: u64 = 1_700_000_000_000;
/// How far behind the clock each kind of caller is (0: on time, an append).
pub const LAGS: [(&str, u64); 5] = [
    ("append", 0),
    ("1 s late", 1000),
    ("1 min late", 60_000),
    ("5 min late", 300_000),
    ("25 min late", 1_500_000),
];
/// Each round sends a batch of each kind, on-time first; the clock runs through all of them.
pub const ROUNDS: usize = 5;
const APPENDS_PER_ROUND: u64 = 2000;
const LATE_PER_ROUND: u64 = 200;
/// Timestamps (or score/member pairs) per filling command.
const FILL_CHUNK: u64 = 1000;
/// Filling commands per pipeline.
const FILL_PIPELINE: u64 = 50;

/// One storage's figures: per kind of caller (LAGS order), calls and in-command µs per call.
pub struct LateResult {
    pub storage: &'static str,
    pub calls: Vec<u64>,
    pub us_per_call: Vec<f64>,
}

impl LateResult {
    /// In-command µs of the kind `label` (a LAGS label) over an append's.
    pub fn over_append(&self, label: &str) -> f64 {
        let at = LAGS.iter().position(|(l, _)| *l == label);
        match (at, self.us_per_call.first()) {
            (Some(i), Some(append)) => self.us_per_call[i] / append,
            _ => f64::NAN,
        }
    }
}

/// Both storages, one after the other on a flushed server (the sorted set's log alone is
/// a quarter of a GB).
pub fn run(con: &mut Connection) -> Result<Vec<LateResult>> {
    let mut results = Vec::new();
    for storage in ["zset", "compact"] {
        redis::cmd("FLUSHALL").exec(con)?;
        let key = format!("sw:late:{storage}");
        if storage == "zset" {
            fill_zset(con, &key)?;
        } else {
            fill_compact(con, &key)?;
        }
        let result = measure(con, &key, storage)?;
        print_progress(&result);
        results.push(result);
    }
    redis::cmd("FLUSHALL").exec(con)?;
    Ok(results)
}

fn print_progress(r: &LateResult) {
    let parts: Vec<String> = LAGS
        .iter()
        .zip(&r.us_per_call)
        .map(|((label, _), us)| format!("{label} {us:.2}"))
        .collect();
    println!(
        "  late  {:<8} in-command µs/call: {}",
        r.storage,
        parts.join(", ")
    );
}

/// The rounds of batches, each kind's in-command time from the commandstats deltas around
/// its batches.
fn measure(con: &mut Connection, key: &str, storage: &'static str) -> Result<LateResult> {
    let mut calls = vec![0u64; LAGS.len()];
    // Each round's µs/call by kind: the median over rounds is reported, so that one stall of the
    // machine inside a small batch does not decide a figure.
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); LAGS.len()];
    let mut clock = FIRST_MS + LOGGED * STEP_MS;
    for _ in 0..ROUNDS {
        for (i, (_, lag)) in LAGS.iter().enumerate() {
            let n = if *lag == 0 {
                APPENDS_PER_ROUND
            } else {
                LATE_PER_ROUND
            };
            let mut pipe = redis::pipe();
            for _ in 0..n {
                clock += STEP_MS;
                pipe.cmd("SLIDINGWINDOW.ALLOW")
                    .arg(key)
                    .arg(WINDOW_S)
                    .arg(MAX)
                    .arg(clock - lag);
            }
            let what = format!("late on {storage}");
            let (done, usec) = info::admitted_batch(con, &pipe, n, &what)?;
            calls[i] += done;
            rounds[i].push(usec as f64 / done.max(1) as f64);
        }
    }
    Ok(LateResult {
        storage,
        us_per_call: rounds.into_iter().map(median).collect(),
        calls,
    })
}

/// The middle value (the mean of the two middle ones for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A sorted set of LOGGED members, one every STEP_MS, as ALLOW would have logged them.
fn fill_zset(con: &mut Connection, key: &str) -> Result<()> {
    let mut members = Members::new(0x1A7E);
    fill(con, key, |pipe, first| {
        let zadd = pipe.cmd("ZADD").arg(key);
        for i in first..(first + FILL_CHUNK).min(LOGGED) {
            let score = FIRST_MS + i * STEP_MS;
            zadd.arg(score).arg(members.next(score));
        }
    })
}

/// A compact log of LOGGED timestamps, one every STEP_MS, written as the replication stream
/// would (`SLIDINGWINDOW.APPLY key "cutoff pexpireat [ts n]..."`).
fn fill_compact(con: &mut Connection, key: &str) -> Result<()> {
    fill(con, key, |pipe, first| {
        let mut change = String::from("-1 0");
        for i in first..(first + FILL_CHUNK).min(LOGGED) {
            change += &format!(" {} 1", FIRST_MS + i * STEP_MS);
        }
        pipe.cmd("SLIDINGWINDOW.APPLY").arg(key).arg(change);
    })
}

/// Sends the filling commands `push` makes (one per FILL_CHUNK requests, oldest first), then
/// checks the key logs LOGGED requests.
fn fill(
    con: &mut Connection,
    key: &str,
    mut push: impl FnMut(&mut redis::Pipeline, u64),
) -> Result<()> {
    let chunks: Vec<u64> = (0..LOGGED).step_by(FILL_CHUNK as usize).collect();
    for group in chunks.chunks(FILL_PIPELINE as usize) {
        let mut pipe = redis::pipe();
        for &first in group {
            push(&mut pipe, first);
        }
        let _: Vec<Value> = pipe.query(con)?;
    }
    let count = logged(con, key)?;
    if count != LOGGED {
        return Err(format!("{key}: built {count} requests, wanted {LOGGED}").into());
    }
    Ok(())
}
