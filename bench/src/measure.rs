//! Runs one variant on one workload: warm-up, a pipelined measured batch, depth-1 latency, memory.

use std::time::Instant;

use redis::{Connection, Pipeline, Value};

use crate::Result;
use crate::info;
use crate::variants::{Sender, Variant};
use crate::workload::{Request, Workload};

/// Requests in the measured (pipelined) batch of each variant and workload.
pub const MEASURED_REQUESTS: u64 = 200_000;
/// Requests per pipeline in the warm-up and measured phases.
pub const PIPELINE_DEPTH: u64 = 1000;
/// Sequential round trips for the latency percentiles.
pub const LATENCY_REQUESTS: usize = 5000;
/// PING keeps no state; a short warm-up just settles the connection and caches.
const PING_WARMUP: u64 = 10_000;
/// Keys sampled for memory per member (all of them when the workload has fewer).
const MEMORY_SAMPLE_KEYS: u64 = 1000;

pub struct Measurement {
    pub workload: &'static str,
    pub variant: Variant,
    pub cpu_us_per_req: f64,
    pub in_command_us_per_req: f64,
    pub throughput_rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub memory: Option<Memory>,
    /// Share of measured requests admitted, where the reply tells (module only).
    pub admitted: Option<f64>,
}

pub struct Memory {
    pub bytes_per_member: f64,
    pub members_per_key: f64,
}

pub fn run(
    con: &mut Connection,
    sha: &str,
    workload: &Workload,
    variant: Variant,
) -> Result<Measurement> {
    redis::cmd("FLUSHALL").exec(con)?;
    let mut sender = Sender::new(variant, workload, sha);
    let mut stream = workload.stream();
    warm_up(con, &mut sender, &mut stream, workload, variant)?;
    let batch = measure_batch(
        con,
        &mut sender,
        &mut stream,
        variant,
        MEASURED_REQUESTS,
        PIPELINE_DEPTH,
    )?;
    let (p50_us, p99_us) = measure_latency(con, &mut sender, &mut stream)?;
    let memory = if variant.stores_keys() {
        Some(measure_memory(con, &sender, workload)?)
    } else {
        None
    };
    Ok(Measurement {
        workload: workload.name,
        variant,
        cpu_us_per_req: batch.cpu_us / MEASURED_REQUESTS as f64,
        in_command_us_per_req: batch.in_command_us / MEASURED_REQUESTS as f64,
        throughput_rps: MEASURED_REQUESTS as f64 / batch.seconds,
        p50_us,
        p99_us,
        memory,
        admitted: batch.admitted.map(|n| n as f64 / MEASURED_REQUESTS as f64),
    })
}

/// One full window of requests (a short settling run for PING) in pipelines of PIPELINE_DEPTH,
/// so that stateful variants are measured in their steady state.
pub fn warm_up(
    con: &mut Connection,
    sender: &mut Sender,
    stream: &mut impl Iterator<Item = Request>,
    workload: &Workload,
    variant: Variant,
) -> Result<()> {
    let warmup = match variant {
        Variant::Ping => PING_WARMUP,
        _ => workload.requests_per_window(),
    };
    send_pipelined(con, sender, stream, warmup, PIPELINE_DEPTH)?;
    Ok(())
}

/// Sends `count` requests in pipelines of `depth`; returns how many were admitted
/// where the replies say so.
fn send_pipelined(
    con: &mut Connection,
    sender: &mut Sender,
    stream: &mut impl Iterator<Item = Request>,
    count: u64,
    depth: u64,
) -> Result<Option<u64>> {
    let mut pipe = Pipeline::with_capacity(depth as usize * 4);
    let mut admitted = None;
    let mut left = count;
    while left > 0 {
        let n = left.min(depth);
        pipe.clear();
        for req in stream.by_ref().take(n as usize) {
            sender.push(&mut pipe, req);
        }
        let replies: Vec<Value> = pipe.query(con)?;
        if let Some(a) = sender.admitted(&replies) {
            admitted = Some(admitted.unwrap_or(0) + a);
        }
        left -= n;
    }
    Ok(admitted)
}

pub struct Batch {
    pub cpu_us: f64,
    pub in_command_us: f64,
    pub seconds: f64,
    pub admitted: Option<u64>,
}

/// The measured phase: server CPU and in-command time over `count` requests in pipelines of
/// `depth`.
pub fn measure_batch(
    con: &mut Connection,
    sender: &mut Sender,
    stream: &mut impl Iterator<Item = Request>,
    variant: Variant,
    count: u64,
    depth: u64,
) -> Result<Batch> {
    info::reset_stats(con)?;
    let cpu_before = info::cpu_us(con)?;
    let started = Instant::now();
    let admitted = send_pipelined(con, sender, stream, count, depth)?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_us = info::cpu_us(con)? - cpu_before;
    let stats = info::command_stats(con, variant.stat_names())?;
    if let Some(bad) = stats.iter().find(|s| s.failed > 0) {
        return Err(format!("{} had {} failed calls", variant.name(), bad.failed).into());
    }
    Ok(Batch {
        cpu_us,
        in_command_us: stats.iter().map(|s| s.usec as f64).sum(),
        seconds,
        admitted,
    })
}

/// p50 and p99 round-trip time in µs of sequential requests (pipeline depth 1).
fn measure_latency(
    con: &mut Connection,
    sender: &mut Sender,
    stream: &mut impl Iterator<Item = Request>,
) -> Result<(f64, f64)> {
    let mut pipe = Pipeline::with_capacity(4);
    let mut samples = Vec::with_capacity(LATENCY_REQUESTS);
    for req in stream.by_ref().take(LATENCY_REQUESTS) {
        pipe.clear();
        sender.push(&mut pipe, req);
        let started = Instant::now();
        let _: Vec<Value> = pipe.query(con)?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok((percentile(&samples, 0.50), percentile(&samples, 0.99)))
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `MEMORY USAGE key SAMPLES 0` over `ZCARD`, summed over a sample of the workload's keys.
fn measure_memory(con: &mut Connection, sender: &Sender, workload: &Workload) -> Result<Memory> {
    let keys: Vec<String> = (0..workload.keys.min(MEMORY_SAMPLE_KEYS))
        .map(|i| sender.key(i))
        .collect();
    let mut usage = redis::pipe();
    let mut cards = redis::pipe();
    for key in &keys {
        usage
            .cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0);
        cards.cmd("ZCARD").arg(key);
    }
    let bytes: Vec<Option<u64>> = usage.query(con)?;
    let members: Vec<u64> = cards.query(con)?;
    let bytes: u64 = bytes.into_iter().flatten().sum();
    let members: u64 = members.into_iter().sum();
    if members == 0 {
        return Err(format!("{}: no members left to measure", workload.name).into());
    }
    Ok(Memory {
        bytes_per_member: bytes as f64 / members as f64,
        members_per_key: members as f64 / keys.len() as f64,
    })
}
