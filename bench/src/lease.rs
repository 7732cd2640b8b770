//! ALLOW with `LEASE` against the same ALLOW without it: one hot key per kind and storage, a
//! window of requests logged, every call admitted (the max never binds), each call one request
//! later than the last. The kinds take turns in rounds of one batch each, on the same clock (the
//! first kind of a round alternating); `INFO commandstats` deltas around each batch. Each kind's
//! in-command µs per call is the median over the rounds, and the ratio the median of each round's
//! own ratio: two batches a few ms apart share the machine's state, so one stall or a busy
//! neighbour moves a round, not the figure.

use redis::{Connection, Value};

use crate::Result;
use crate::info;
use crate::late::median;

const WINDOW_S: u64 = 10;
/// Never binds: every call is admitted, with its lease or without.
const MAX: u64 = 1 << 40;
const STEP_MS: u64 = 5;
const FIRST_MS: u64 = 1_700_000_000_000;
/// The lease of the `lease` kind: 100 ms, as `--lease 100/100ms` takes.
pub const LEASE_MS: u64 = 100;
/// One window of requests before measuring.
const WARM_UP: u64 = WINDOW_S * 1000 / STEP_MS;
pub const ROUNDS: usize = 41;
/// Calls per batch; a round is one batch of each kind.
pub const BATCH: u64 = 2000;
/// The kinds, in the order they take turns: without LEASE, with it.
pub const KINDS: [&str; 2] = ["plain", "lease"];

/// One storage's figures: in-command µs per call of each kind (KINDS order), and the median of
/// the rounds' ratios, with LEASE over without.
pub struct LeaseResult {
    pub storage: &'static str,
    pub us_per_call: [f64; 2],
    pub ratio: f64,
}

impl LeaseResult {
    /// The lease's in-command µs over the plain call's.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }
}

/// Both storages, each on a flushed server; empty when the module has no `LEASE`.
pub fn run(con: &mut Connection) -> Result<Vec<LeaseResult>> {
    let probe = redis::cmd("SLIDINGWINDOW.PEEK")
        .arg("sw:lease:probe")
        .arg(1)
        .arg(1)
        .arg(0)
        .arg("LEASE")
        .arg(1)
        .query::<Value>(con);
    if probe.is_err() {
        println!(
            "SLIDINGWINDOW.ALLOW ... LEASE: unknown to this module; its figures are unavailable"
        );
        return Ok(Vec::new());
    }
    let configured: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slidingwindow.storage")
        .query(con)?;
    let mut results = Vec::new();
    for storage in ["zset", "compact"] {
        redis::cmd("FLUSHALL").exec(con)?;
        set_storage(con, storage)?;
        let keys = KINDS.map(|kind| format!("sw:lease:{storage}:{kind}"));
        let mut clock = FIRST_MS;
        let mut pipe = redis::pipe();
        for _ in 0..WARM_UP {
            clock += STEP_MS;
            for (i, key) in keys.iter().enumerate() {
                allow(&mut pipe, key, clock, i == 1);
            }
        }
        let _: Vec<Value> = pipe.query(con)?;
        let mut rounds: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            let start = clock;
            for i in [round % 2, 1 - round % 2] {
                let key = &keys[i];
                // Both kinds see the same times: each batch replays the round's clock.
                clock = start;
                let mut pipe = redis::pipe();
                for _ in 0..BATCH {
                    clock += STEP_MS;
                    allow(&mut pipe, key, clock, i == 1);
                }
                let what = format!("lease on {storage}, {}", KINDS[i]);
                let (calls, usec) = info::admitted_batch(con, &pipe, BATCH, &what)?;
                rounds[i].push(usec as f64 / calls.max(1) as f64);
            }
        }
        let ratios: Vec<f64> = rounds[1]
            .iter()
            .zip(&rounds[0])
            .map(|(l, p)| l / p)
            .collect();
        let result = LeaseResult {
            storage,
            us_per_call: rounds.map(median),
            ratio: median(ratios),
        };
        println!(
            "  lease {:<8} in-command µs/call: without {:.3}, with LEASE {LEASE_MS} {:.3} ({:.3}x)",
            storage,
            result.us_per_call[0],
            result.us_per_call[1],
            result.ratio()
        );
        results.push(result);
    }
    redis::cmd("FLUSHALL").exec(con)?;
    set_storage(con, configured.get(1).map_or("zset", String::as_str))?;
    Ok(results)
}

/// The storage of the keys the calls create.
fn set_storage(con: &mut Connection, storage: &str) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slidingwindow.storage")
        .arg(storage)
        .exec(con)?;
    Ok(())
}

fn allow(pipe: &mut redis::Pipeline, key: &str, now: u64, lease: bool) {
    let cmd = pipe
        .cmd("SLIDINGWINDOW.ALLOW")
        .arg(key)
        .arg(WINDOW_S)
        .arg(MAX)
        .arg(now);
    if lease {
        cmd.arg("LEASE").arg(LEASE_MS);
    }
}
