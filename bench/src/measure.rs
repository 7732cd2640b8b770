//! Runs every variant on one workload: first each alone (warm-up, measured batch, memory),
//! then all of them taking turns (warm-up, depth-1 round trips).

use std::time::Instant;

use redis::{Connection, Value};

use crate::Result;
use crate::info;
use crate::lanes::{self, Lane, PIPELINE_DEPTH};
use crate::server::Servers;
use crate::settings::Settings;
use crate::variants::{ALL, Variant};
use crate::workload::Workload;

/// Requests in the measured (pipelined) batch of each variant and workload.
pub const MEASURED_REQUESTS: u64 = 200_000;
/// Sequential round trips per variant for the latency percentiles.
pub const LATENCY_REQUESTS: usize = 5000;
/// Keys sampled for memory per member (all of them when the workload has fewer).
pub const MEMORY_SAMPLE_KEYS: u64 = 1000;

pub struct Measurement {
    pub workload: &'static str,
    pub variant: &'static Variant,
    /// Whether the CPU and in-command figures are the paired turns' (second pass); if not,
    /// keys expired while the variants took turns, and they are the batch run alone's.
    pub paired: bool,
    /// Server CPU and in-command time per request.
    pub cpu_us_per_req: f64,
    pub in_command_us_per_req: f64,
    /// The same over the batch run alone (first pass), kept for comparison in the JSON.
    pub alone_cpu_us_per_req: f64,
    pub alone_in_command_us_per_req: f64,
    /// One entry per command of a request (four for `commands`), over the measured batch.
    pub in_command_percentiles: Vec<CommandLatency>,
    pub throughput_rps: f64,
    /// Round trips, interleaved with the other variants'.
    pub round_trip_p50_us: f64,
    pub round_trip_p99_us: f64,
    pub memory: Option<Memory>,
    /// Share of measured requests admitted, where the reply tells (module only).
    pub admitted: Option<f64>,
}

/// One command's in-command time percentiles (info::PERCENTILES), in µs.
pub struct CommandLatency {
    pub command: &'static str,
    pub usec: [f64; 3],
}

pub struct Memory {
    /// `MEMORY USAGE` (key overhead included) per member.
    pub bytes_per_member: f64,
    pub members_per_key: f64,
    /// The growth of `used_memory` from the empty server to the filled one, per member and per
    /// key: what the keys cost the server, TTLs and allocator slack included.
    pub used_per_member: f64,
    pub used_per_key: f64,
}

/// Every variant that serves `workload`, in table order.
pub fn run(
    servers: &Servers,
    sha: &str,
    workload: &Workload,
    settings: &mut Settings,
) -> Result<Vec<Measurement>> {
    let variants: Vec<&'static Variant> = ALL
        .iter()
        .copied()
        .filter(|v| servers.runs(v, workload))
        .collect();
    let mut alone = Vec::new();
    for &variant in &variants {
        alone.push(run_alone(servers, sha, workload, variant, settings)?);
    }
    let SideBySide {
        round_trips,
        paired,
    } = run_interleaved(servers, sha, workload, &variants, settings)?;
    let is_paired = paired.is_some();
    let paired = paired.unwrap_or_default();
    let n = MEASURED_REQUESTS as f64;
    Ok(variants
        .into_iter()
        .zip(alone)
        .zip(round_trips)
        .enumerate()
        .map(|(i, ((variant, (batch, memory)), samples))| {
            let (cpu_us, in_command_us) = match paired.get(i) {
                Some(p) => (p.cpu_us, p.in_command_us),
                None => (batch.cpu_us, batch.in_command_us),
            };
            Measurement {
                workload: workload.name,
                variant,
                paired: is_paired,
                cpu_us_per_req: cpu_us / n,
                in_command_us_per_req: in_command_us / n,
                alone_cpu_us_per_req: batch.cpu_us / n,
                alone_in_command_us_per_req: batch.in_command_us / n,
                in_command_percentiles: batch.in_command_percentiles,
                throughput_rps: n / batch.seconds,
                round_trip_p50_us: percentile(&samples, 0.50),
                round_trip_p99_us: percentile(&samples, 0.99),
                memory,
                admitted: batch.admitted.map(|a| a as f64 / n),
            }
        })
        .collect())
}

/// One variant alone on a flushed server: warm-up, measured batch, memory. Alone, because
/// CPU and the command stats are server-wide totals kept per command name, and the script's
/// `redis.call`s and the module's own `RedisModule_Call`s count under the names that
/// `commands` sends.
fn run_alone(
    servers: &Servers,
    sha: &str,
    workload: &Workload,
    variant: &'static Variant,
    settings: &mut Settings,
) -> Result<(Batch, Option<Memory>)> {
    let mut lane = Lane::open(servers, variant, workload, sha)?;
    redis::cmd("FLUSHALL").exec(&mut lane.con)?;
    info::reset_stats(&mut lane.con)?;
    lanes::warm_up(std::slice::from_mut(&mut lane), settings)?;
    let mut expired = info::expired_keys(&mut lane.con)?;
    let batch = measure_batch(&mut lane, settings, MEASURED_REQUESTS, PIPELINE_DEPTH)?;
    let memory = if variant.shape.stores_keys() {
        Some(measure_memory(&mut lane)?)
    } else {
        None
    };
    // The batch reset the count: this reads what expired since it began.
    expired += info::expired_keys(&mut lane.con)?;
    // redis-cell's keys live until their rate has refilled, on the server's clock: they expire
    // by design, and its server is its own.
    if expired > 0 && !variant.shape.on_cell_server() {
        let message = expired_message(workload, variant.name, expired);
        // A few of `wide`'s keys, each touched now and then (the script's only when it admits),
        // barely move the figures; any more, or any key of a one-key workload, would.
        if expired > workload.keys / 100 {
            return Err(message.into());
        }
        println!("  warning: {message}");
    }
    Ok((batch, memory))
}

/// Every variant side by side on a flushed server (each in its own database): a warm-up, the
/// paired CPU measurement and the round trips, all taking turns, so that no variant pays for
/// running first or at a slower spell of the machine.
fn run_interleaved(
    servers: &Servers,
    sha: &str,
    workload: &Workload,
    variants: &[&'static Variant],
    settings: &mut Settings,
) -> Result<SideBySide> {
    let mut lanes = Vec::new();
    for &variant in variants {
        lanes.push(Lane::open(servers, variant, workload, sha)?);
    }
    if lanes.is_empty() {
        return Ok(SideBySide {
            round_trips: Vec::new(),
            paired: None,
        });
    }
    // Every lane's server (redis-cell's is another); the first lane is on the module's, whose
    // expired keys are counted below.
    for lane in &mut lanes {
        redis::cmd("FLUSHALL").exec(&mut lane.con)?;
        info::reset_stats(&mut lane.con)?;
    }
    lanes::warm_up(&mut lanes, settings)?;
    let paired = lanes::paired(&mut lanes, settings, MEASURED_REQUESTS)?;
    // Taking turns, each variant touches its keys less often than alone: on a busy machine some
    // of `wide`'s expire, and the paired figures would not be the steady state's.
    let expired_before = info::expired_keys(&mut lanes[0].con)?;
    let paired = if expired_before > workload.keys / 100 {
        println!(
            "  note: {}; CPU and in-command figures come from the variants run alone",
            expired_message(workload, "the variants taking turns", expired_before)
        );
        None
    } else {
        Some(paired)
    };
    let samples = lanes::round_trips(&mut lanes, settings, LATENCY_REQUESTS)?;
    // A round trip costs about the same on a rebuilt key, so this only warns.
    let expired = info::expired_keys(&mut lanes[0].con)?.saturating_sub(expired_before);
    if expired > 0 {
        println!(
            "  warning: round trips: {}",
            expired_message(workload, "the variants", expired)
        );
    }
    Ok(SideBySide {
        round_trips: samples,
        paired,
    })
}

/// What the variants give taking turns: each one's round-trip times (µs, sorted), and its
/// paired CPU and in-command time unless keys expired meanwhile.
struct SideBySide {
    round_trips: Vec<Vec<f64>>,
    paired: Option<Vec<lanes::Spent>>,
}

/// Keys the server expired on its own clock (their TTL is the window, in real seconds): their
/// variant sat idle that long, so it was not in its steady state.
fn expired_message(workload: &Workload, who: &str, expired: u64) -> String {
    format!(
        "{expired} keys of {who} on `{}` expired on the server's clock, idle for longer than \
         the window (is the machine busy?)",
        workload.name
    )
}

pub struct Batch {
    pub cpu_us: f64,
    pub in_command_us: f64,
    pub in_command_percentiles: Vec<CommandLatency>,
    pub seconds: f64,
    pub admitted: Option<u64>,
}

/// The measured phase of one lane, alone on the server: server CPU, in-command time and its
/// percentiles over `count` requests in pipelines of `depth`.
pub fn measure_batch(
    lane: &mut Lane,
    settings: &mut Settings,
    count: u64,
    depth: u64,
) -> Result<Batch> {
    // Reset first, for the latency histograms; CPU and commandstats count differences.
    info::reset_stats(&mut lane.con)?;
    let started = Instant::now();
    let (spent, admitted) = lane.send_accounted(settings, count, depth)?;
    let seconds = started.elapsed().as_secs_f64();
    let names = lane.sender.stat_names();
    let percentiles = info::latency_percentiles(&mut lane.con, names)?;
    Ok(Batch {
        cpu_us: spent.cpu_us,
        in_command_us: spent.in_command_us,
        in_command_percentiles: names
            .iter()
            .zip(percentiles)
            .map(|(&command, usec)| CommandLatency { command, usec })
            .collect(),
        seconds,
        admitted,
    })
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `MEMORY USAGE key SAMPLES 0` over the members stored, summed over a sample of the
/// workload's keys (all the keys of a request key, for one call per limit); and what the keys
/// held of `used_memory`, read before and after a `FLUSHALL SYNC` on the same idle connection
/// (so client buffers weigh the same both times).
fn measure_memory(lane: &mut Lane) -> Result<Memory> {
    let keys = lane.workload.keys.min(MEMORY_SAMPLE_KEYS);
    let mut usage = redis::pipe();
    let mut counts = redis::pipe();
    // A tenant's key is behind every request key: measured once.
    let mut sampled: Vec<String> = (0..keys).flat_map(|i| lane.sender.keys(i)).collect();
    sampled.sort_unstable();
    sampled.dedup();
    for key in sampled {
        usage
            .cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0);
        lane.sender.push_member_count(&mut counts, &key);
    }
    let con: &mut Connection = &mut lane.con;
    let bytes: Vec<Option<u64>> = usage.query(con)?;
    let replies: Vec<Value> = counts.query(con)?;
    let bytes: u64 = bytes.into_iter().flatten().sum();
    let mut members = 0;
    for reply in &replies {
        members += lane.sender.members_in(reply)?;
    }
    if members == 0 {
        return Err(format!(
            "{} on {}: no members left to measure",
            lane.variant.name, lane.workload.name
        )
        .into());
    }
    let members_per_key = members as f64 / keys as f64;
    // Redis's own bookkeeping moves used_memory by tens of KB between readings: enough keys
    // must change for a difference to mean anything. Many keys are measured by flushing them;
    // a workload of one key by copying it COPIES times (COPY makes an exact twin).
    let used_per_key = if lane.workload.keys >= COPIES {
        let filled = info::used_memory(con)?;
        redis::cmd("FLUSHALL").arg("SYNC").exec(con)?;
        filled.saturating_sub(info::used_memory(con)?) as f64 / lane.workload.keys as f64
    } else {
        let before = info::used_memory(con)?;
        let mut copies = redis::pipe();
        for c in 0..COPIES {
            for key in lane.sender.keys(0) {
                copies.cmd("COPY").arg(&key).arg(format!("{key}:copy:{c}"));
            }
        }
        let _: Vec<Value> = copies.query(con)?;
        let after = info::used_memory(con)?;
        // One request key copied (with its key per limit, for the split variants).
        after.saturating_sub(before) as f64 / COPIES as f64
    };
    Ok(Memory {
        bytes_per_member: bytes as f64 / members as f64,
        members_per_key,
        used_per_member: used_per_key / members_per_key,
        used_per_key,
    })
}

/// Copies of a one-key workload's key whose used_memory is measured.
pub const COPIES: u64 = 64;
