//! The `churn` workload: what a compact log's block edges cost on logs of 100M requests and
//! more, each against the same calls inside a block with room; a block opened by every call on
//! a 100M-request log against a 1M-request one; RESTORE of 10M and 200M requests; and the bytes
//! per request after removals at several spans. In-command time from `INFO commandstats`
//! deltas around each batch, the two sides of each comparison taking turns, the median of the
//! rounds reported.

use redis::{Connection, Value};

use crate::Result;
use crate::info;
use crate::worst::logged;
use slidingwindow_core::error::MAX_EXACT;
use testkit::dump::{payload, varint, write_len};

/// Never trims: 9e12 s (9e15 ms) reaches back before any timestamp used here.
const WINDOW_S: u64 = 9_000_000_000_000;
/// Never binds: the largest max the contract allows.
const MAX: u64 = MAX_EXACT;
const FIRST_MS: u64 = 1_700_000_000_000;
/// Slots of a block of one-byte slots (a burst), and of two-byte ones (requests a ms apart):
/// the module's 4 KiB blocks.
const BURST_BLOCK: u64 = 4096;
const DENSE_BLOCK: u64 = 2048;
/// The tail churn's log: BURSTS calls of COST BURST, one ms apart, the last block exactly full.
pub const BURSTS: u64 = 1500;
pub const BURST: u64 = 24 * BURST_BLOCK;
/// The middle churn's log: requests a ms apart.
pub const MIDDLE: u64 = 100_000_000;
/// Block openings: logs of these sizes, made of COST OPENING_FILL calls.
pub const OPENING_LOGS: [u64; 2] = [100_000_000, 1_000_000];
const OPENING_FILL: u64 = 100_000;
/// RESTORE: logs of requests a ms apart.
pub const RESTORES: [u64; 2] = [10_000_000, 200_000_000];
const ROUNDS: usize = 5;
const RESTORE_TRIALS: usize = 5;
/// Loops per batch.
const TAIL_LOOPS: u64 = 2000;
const MIDDLE_LOOPS: u64 = 1000;
const OPENINGS: u64 = 200;
/// Bytes after removals: requests per log, and the spans (ms) they are spread over; the first
/// is a ms apart.
pub const BYTES_REQUESTS: u64 = 100_000;
pub const SPANS: [u64; 6] = [
    BYTES_REQUESTS,
    1 << 24,
    1 << 32,
    1 << 39,
    1 << 44,
    (1 << 53) - 1000,
];

#[derive(Debug, Default)]
pub struct ChurnResult {
    /// In-command µs per ALLOW + REFUND pair, past a full last block and inside one with room.
    pub tail_edge_us: f64,
    pub tail_inside_us: f64,
    /// In-command µs per REFUND 2 + two ALLOWs, across a block edge and inside a block.
    pub middle_edge_us: f64,
    pub middle_inside_us: f64,
    /// In-command µs per ALLOW that opens a block, per OPENING_LOGS size.
    pub opening_us: Vec<f64>,
    /// In-command ms of RESTORE, per RESTORES size.
    pub restore_ms: Vec<f64>,
    /// Per span of SPANS: the most bytes per request (MEMORY USAGE) seen after removals.
    pub bytes: Vec<f64>,
}

impl ChurnResult {
    /// The contract's bound on bytes per request for a log over `span`: 3 for a dense one.
    pub fn bound(span: u64) -> f64 {
        match span {
            BYTES_REQUESTS => 3.0,
            _ if span < 1 << 40 => 8.0,
            _ => 10.0,
        }
    }
}

/// Every part on a flushed server whose ALLOWs create compact keys (the storage is set back
/// after).
pub fn run(con: &mut Connection) -> Result<ChurnResult> {
    let storage: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slidingwindow.storage")
        .query(con)?;
    let set = |con: &mut Connection, value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slidingwindow.storage")
            .arg(value)
            .exec(con)
    };
    set(con, "compact")?;
    let r = parts(con);
    set(con, storage.get(1).map_or("zset", String::as_str))?;
    r
}

/// `measure` on an emptied server.
fn fresh<T>(con: &mut Connection, measure: fn(&mut Connection) -> Result<T>) -> Result<T> {
    redis::cmd("FLUSHALL").exec(con)?;
    measure(con)
}

fn parts(con: &mut Connection) -> Result<ChurnResult> {
    let mut r = ChurnResult::default();
    (r.tail_edge_us, r.tail_inside_us) = fresh(con, tail)?;
    println!(
        "  churn tail: ALLOW + REFUND {:.2} µs past a full block, {:.2} µs inside one",
        r.tail_edge_us, r.tail_inside_us
    );
    (r.middle_edge_us, r.middle_inside_us) = fresh(con, middle)?;
    println!(
        "  churn middle: REFUND 2 + 2 ALLOWs {:.2} µs across a block edge, {:.2} µs inside one",
        r.middle_edge_us, r.middle_inside_us
    );
    r.opening_us = fresh(con, opening)?;
    println!(
        "  churn block opening: µs/call {:?} on {OPENING_LOGS:?}",
        r.opening_us
    );
    r.restore_ms = fresh(con, restore)?;
    println!("  churn RESTORE: ms {:?} for {RESTORES:?}", r.restore_ms);
    r.bytes = fresh(con, bytes)?;
    println!(
        "  churn bytes/request after removals: {:?} for spans {SPANS:?}",
        r.bytes
    );
    redis::cmd("FLUSHALL").exec(con)?;
    Ok(r)
}

fn allow(pipe: &mut redis::Pipeline, key: &str, now: u64, cost: u64) {
    pipe.cmd("SLIDINGWINDOW.ALLOW")
        .arg(key)
        .arg(WINDOW_S)
        .arg(MAX)
        .arg(now)
        .arg("COST")
        .arg(cost);
}

/// Sends `pipe`, checking that every ALLOW was admitted; the in-command µs of `names` it took,
/// summed.
fn timed(con: &mut Connection, pipe: &redis::Pipeline, names: &[&str]) -> Result<f64> {
    let before = info::command_stats(con, names)?;
    let replies: Vec<Value> = pipe.query(con)?;
    let after = info::command_stats(con, names)?;
    if after.iter().zip(&before).any(|(a, b)| a.failed > b.failed) {
        return Err(format!("churn: failed calls among {names:?}").into());
    }
    let refused = replies
        .iter()
        .filter(|r| matches!(r, Value::Array(f) if f.first() == Some(&Value::Int(0))))
        .count();
    if refused > 0 {
        return Err(format!("churn: {refused} ALLOWs refused").into());
    }
    Ok(after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.usec.saturating_sub(b.usec) as f64)
        .sum())
}

/// Runs `batch(0)` and `batch(1)` in turns for ROUNDS rounds: the median µs per loop of each.
fn in_turns(loops: u64, mut batch: impl FnMut(usize) -> Result<f64>) -> Result<(f64, f64)> {
    let mut us: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (side, v) in us.iter_mut().enumerate() {
            v.push(batch(side)? / loops as f64);
        }
    }
    let [a, b] = us;
    Ok((median(a), median(b)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Tail churn: `ALLOW key ... newest+1000` then `REFUND key 1`, on a log of BURSTS bursts whose
/// last block is exactly full, against the same on one whose last block has room for it (its
/// last burst 2049 smaller: 2047 slots left at one byte, room for one more at two).
fn tail(con: &mut Connection) -> Result<(f64, f64)> {
    let keys = ["sw:churn:tail:edge", "sw:churn:tail:inside"];
    let newest = FIRST_MS + BURSTS - 1;
    for (key, last) in keys.iter().zip([BURST, BURST - DENSE_BLOCK - 1]) {
        for first in (0..BURSTS).step_by(50) {
            let mut pipe = redis::pipe();
            for i in first..(first + 50).min(BURSTS) {
                let cost = if i + 1 == BURSTS { last } else { BURST };
                allow(&mut pipe, key, FIRST_MS + i, cost);
            }
            let _: Vec<Value> = pipe.query(con)?;
        }
    }
    in_turns(TAIL_LOOPS, |side| {
        let key = keys[side];
        let mut pipe = redis::pipe();
        for _ in 0..TAIL_LOOPS {
            allow(&mut pipe, key, newest + 1000, 1);
            pipe.cmd("SLIDINGWINDOW.REFUND").arg(key).arg(1);
        }
        timed(con, &pipe, &["slidingwindow.allow", "slidingwindow.refund"])
    })
}

/// Middle churn: `REFUND key 2 AT b`, `ALLOW ... b-1`, `ALLOW ... b` where `b` is the first
/// timestamp of a block in the middle of a log of MIDDLE requests a ms apart (loaded as RESTORE
/// packs it: full blocks of DENSE_BLOCK), against the same half a block further.
fn middle(con: &mut Connection) -> Result<(f64, f64)> {
    let key = "sw:churn:middle";
    restore_dense(con, key, MIDDLE)?;
    let edge = FIRST_MS + (MIDDLE / DENSE_BLOCK / 2) * DENSE_BLOCK;
    in_turns(MIDDLE_LOOPS, |side| {
        let b = edge + side as u64 * DENSE_BLOCK / 2;
        let mut pipe = redis::pipe();
        for _ in 0..MIDDLE_LOOPS {
            pipe.cmd("SLIDINGWINDOW.REFUND")
                .arg(key)
                .arg(2)
                .arg("AT")
                .arg(b);
            allow(&mut pipe, key, b - 1, 1);
            allow(&mut pipe, key, b, 1);
        }
        timed(con, &pipe, &["slidingwindow.allow", "slidingwindow.refund"])
    })
}

/// Block opening: calls of `COST BURST_BLOCK` a ms apart, each past the last block, so each
/// fills exactly one new block; on a log of each of OPENING_LOGS, in turns.
fn opening(con: &mut Connection) -> Result<Vec<f64>> {
    let keys = ["sw:churn:open:big", "sw:churn:open:small"];
    for (key, size) in keys.iter().zip(OPENING_LOGS) {
        let calls = size / OPENING_FILL;
        for first in (0..calls).step_by(50) {
            let mut pipe = redis::pipe();
            for i in first..(first + 50).min(calls) {
                allow(&mut pipe, key, FIRST_MS + i, OPENING_FILL);
            }
            let _: Vec<Value> = pipe.query(con)?;
        }
        if logged(con, key)? != size {
            return Err(format!("{key}: not {size} requests").into());
        }
    }
    let mut next = [FIRST_MS + OPENING_LOGS[0] / OPENING_FILL; 2];
    next[1] = FIRST_MS + OPENING_LOGS[1] / OPENING_FILL;
    let (big, small) = in_turns(OPENINGS, |side| {
        let mut pipe = redis::pipe();
        for _ in 0..OPENINGS {
            allow(&mut pipe, keys[side], next[side], BURST_BLOCK);
            next[side] += 1;
        }
        timed(con, &pipe, &["slidingwindow.allow"])
    })?;
    Ok(vec![big, small])
}

/// RESTORE of each of RESTORES, RESTORE_TRIALS times in turns: the median in-command ms.
fn restore(con: &mut Connection) -> Result<Vec<f64>> {
    let payloads: Vec<Vec<u8>> = RESTORES
        .iter()
        .map(|n| dense_payload(con, *n))
        .collect::<Result<_>>()?;
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); RESTORES.len()];
    for _ in 0..RESTORE_TRIALS {
        for (i, payload) in payloads.iter().enumerate() {
            let key = format!("sw:churn:restore:{}", RESTORES[i]);
            let before = info::command_stats(con, &["restore"])?[0];
            redis::cmd("RESTORE")
                .arg(&key)
                .arg(0)
                .arg(payload)
                .exec(con)?;
            let after = info::command_stats(con, &["restore"])?[0];
            if logged(con, &key)? != RESTORES[i] {
                return Err(format!("{key}: RESTORE did not make {} requests", RESTORES[i]).into());
            }
            ms[i].push(after.usec.saturating_sub(before.usec) as f64 / 1000.0);
            redis::cmd("UNLINK").arg(&key).exec(con)?;
            freed(con)?;
        }
    }
    println!("  churn RESTORE trials, ms: {ms:?}");
    Ok(ms.into_iter().map(median).collect())
}

/// Waits until the background thread has freed what UNLINK handed it, so that a RESTORE
/// shares the machine with nothing of the bench's own.
fn freed(con: &mut Connection) -> Result<()> {
    for _ in 0..6000 {
        let text: String = redis::cmd("INFO").arg("memory").query(con)?;
        let pending = text
            .lines()
            .find_map(|l| l.strip_prefix("lazyfree_pending_objects:"))
            .map(str::trim);
        if pending.is_none_or(|p| p == "0") {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err("UNLINK: the background free did not finish in a minute".into())
}

/// Restores into `key` a log of `n` requests a ms apart.
fn restore_dense(con: &mut Connection, key: &str, n: u64) -> Result<()> {
    let payload = dense_payload(con, n)?;
    redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(&payload)
        .exec(con)?;
    if logged(con, key)? != n {
        return Err(format!("{key}: RESTORE did not make {n} requests").into());
    }
    Ok(())
}

/// A DUMP payload of a compact log of `n` requests a ms apart, written here as the module's
/// encoding 1 says (the count, then the first timestamp and each distance, 1, as varints) in
/// the server's framing, which a DUMP of a one-request key shows: the type and module id before
/// the value, the RDB version after it, then the CRC-64 of it all.
fn dense_payload(con: &mut Connection, n: u64) -> Result<Vec<u8>> {
    let probe = "sw:churn:probe";
    redis::cmd("SLIDINGWINDOW.APPLY")
        .arg(probe)
        .arg(format!("-1 0 {FIRST_MS} 1"))
        .exec(con)?;
    let dump: Vec<u8> = redis::cmd("DUMP").arg(probe).query(con)?;
    redis::cmd("DEL").arg(probe).exec(con)?;
    // Type 7, then the module id: 0x81 and 8 bytes.
    let (Some(head), Some(version)) = (
        dump.get(..10),
        dump.len()
            .checked_sub(10)
            .and_then(|at| dump.get(at..at + 2)),
    ) else {
        return Err("a DUMP too short to be a compact log's".into());
    };
    let mut varints = Vec::with_capacity(n as usize + 8);
    varint(&mut varints, FIRST_MS);
    varints.resize(varints.len() + n as usize - 1, 1);
    let mut body = head.to_vec();
    body.push(2); // an unsigned: the count
    write_len(&mut body, n);
    body.push(5); // a string: the varints
    write_len(&mut body, varints.len() as u64);
    body.extend_from_slice(&varints);
    body.push(0); // the value's end
    Ok(payload(&body, version))
}

/// Bytes per request after removals: per span, BYTES_REQUESTS requests spread evenly (written
/// as APPLY batches), then half of every block-sized run refunded from its end, then refunds of
/// random sizes at random times; the most MEMORY USAGE per request seen.
fn bytes(con: &mut Connection) -> Result<Vec<f64>> {
    let mut rng = testkit::rng::Rng::new(0x1004);
    let mut worst = Vec::new();
    for span in SPANS {
        let key = format!("sw:churn:bytes:{span}");
        let start = (1u64 << 53) - span;
        let ts: Vec<u64> = (0..BYTES_REQUESTS)
            .map(|i| start + span / BYTES_REQUESTS * i)
            .collect();
        let mut pipe = redis::pipe();
        for chunk in ts.chunks(512) {
            let pairs: Vec<String> = chunk.iter().map(|t| format!("{t} 1")).collect();
            pipe.cmd("SLIDINGWINDOW.APPLY")
                .arg(&key)
                .arg(format!("-1 0 {}", pairs.join(" ")));
        }
        let _: Vec<Value> = pipe.query(con)?;
        // The runs that filled one 4 KiB block at the width this spacing takes.
        let gap = span / BYTES_REQUESTS;
        let run = (1..=7u64)
            .map(|w| 4096 / w)
            .find(|slots| (slots - 1) * gap < 1u64 << (8 * (4096 / slots)).min(63))
            .unwrap_or(585);
        let mut most: f64 = 0.0;
        let mut pipe = redis::pipe();
        for last in ts.chunks(run as usize).filter_map(|c| c.last()) {
            pipe.cmd("SLIDINGWINDOW.REFUND")
                .arg(&key)
                .arg(run / 2)
                .arg("AT")
                .arg(*last);
        }
        let _: Vec<Value> = pipe.query(con)?;
        most = most.max(per_request(con, &key)?);
        let mut pipe = redis::pipe();
        for _ in 0..3000 {
            pipe.cmd("SLIDINGWINDOW.REFUND")
                .arg(&key)
                .arg(rng.range(1, 30))
                .arg("AT")
                .arg(start + rng.range(0, span));
        }
        let _: Vec<Value> = pipe.query(con)?;
        most = most.max(per_request(con, &key)?);
        worst.push(most);
    }
    Ok(worst)
}

/// MEMORY USAGE of `key` per request it logs (at least 1000 of them, or an error).
fn per_request(con: &mut Connection, key: &str) -> Result<f64> {
    let count = logged(con, key)?;
    if count < 1000 {
        return Err(format!("{key}: {count} requests left, under the contract's 1000").into());
    }
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query(con)?;
    Ok(bytes as f64 / count as f64)
}
