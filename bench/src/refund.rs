//! REFUND against ALLOW: one key per storage, warmed by a full window as `hot` is (offered
//! twice its max), then pipelines of two ALLOWs and a REFUND of one request at the second's
//! `now` (a caller taking back the request it just made; taking back every other one keeps the
//! window full). `INFO commandstats` keeps the two commands apart in one pipeline.

use redis::{Connection, Value};

use crate::Result;
use crate::info;

const WINDOW_S: u64 = 10;
const MAX: u64 = 1000;
const STEP_MS: u64 = 5;
const FIRST_MS: u64 = 1_700_000_000_000;
/// One window of requests before measuring.
const WARM_UP: u64 = WINDOW_S * 1000 / STEP_MS;
/// Measured REFUND calls (each after two ALLOWs), and per pipeline.
pub const REFUNDS: u64 = 25_000;
const REFUNDS_PER_PIPELINE: u64 = 250;
const NAMES: [&str; 2] = ["slidingwindow.allow", "slidingwindow.refund"];

pub struct RefundResult {
    pub storage: &'static str,
    /// In-command µs per call.
    pub allow_us: f64,
    pub refund_us: f64,
    /// Requests the REFUND calls took back.
    pub refunded: u64,
}

/// Both storages, each on a flushed server.
pub fn run(con: &mut Connection) -> Result<Vec<RefundResult>> {
    let mut results = Vec::new();
    for storage in ["zset", "compact"] {
        redis::cmd("FLUSHALL").exec(con)?;
        let key = format!("sw:refund:{storage}");
        let mut clock = FIRST_MS;
        if storage == "compact" {
            // APPLY creates a compact key whatever the configured storage.
            redis::cmd("SLIDINGWINDOW.APPLY")
                .arg(&key)
                .arg(format!("-1 0 {clock} 1"))
                .exec(con)?;
        }
        let mut pipe = redis::pipe();
        for _ in 0..WARM_UP {
            clock += STEP_MS;
            allow(&mut pipe, &key, clock);
        }
        let _: Vec<Value> = pipe.query(con)?;
        let before = info::command_stats(con, &NAMES)?;
        let mut refunded = 0;
        for _ in 0..REFUNDS / REFUNDS_PER_PIPELINE {
            let mut pipe = redis::pipe();
            for _ in 0..REFUNDS_PER_PIPELINE {
                for _ in 0..2 {
                    clock += STEP_MS;
                    allow(&mut pipe, &key, clock);
                }
                pipe.cmd("SLIDINGWINDOW.REFUND")
                    .arg(&key)
                    .arg(1)
                    .arg("AT")
                    .arg(clock);
            }
            let replies: Vec<Value> = pipe.query(con)?;
            refunded += replies
                .iter()
                .skip(2)
                .step_by(3)
                .filter(|r| **r == Value::Int(1))
                .count() as u64;
        }
        let after = info::command_stats(con, &NAMES)?;
        if after.iter().zip(&before).any(|(a, b)| a.failed > b.failed) {
            return Err(format!("refund on {storage}: failed calls").into());
        }
        let per_call = |i: usize| {
            let usec = after[i].usec.saturating_sub(before[i].usec);
            usec as f64 / after[i].calls.saturating_sub(before[i].calls) as f64
        };
        let result = RefundResult {
            storage,
            allow_us: per_call(0),
            refund_us: per_call(1),
            refunded,
        };
        println!(
            "  refund {:<8} in-command µs/call: allow {:.2}, refund {:.2} ({} of {REFUNDS} took one back)",
            storage, result.allow_us, result.refund_us, result.refunded
        );
        results.push(result);
    }
    redis::cmd("FLUSHALL").exec(con)?;
    Ok(results)
}

fn allow(pipe: &mut redis::Pipeline, key: &str, now: u64) {
    pipe.cmd("SLIDINGWINDOW.ALLOW")
        .arg(key)
        .arg(WINDOW_S)
        .arg(MAX)
        .arg(now);
}
