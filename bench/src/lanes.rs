//! A lane is one variant's connection, request builder and request stream on one workload,
//! on the variant's own database. Lanes run alone, or side by side on one server taking turns
//! in their warm-ups and round trips.

use std::time::Instant;

use redis::{Connection, Pipeline, Value};

use crate::Result;
use crate::info;
use crate::server::{Server, Servers};
use crate::settings::Settings;
use crate::variants::{Sender, Shape, Variant};
use crate::workload::{Stream, Workload};

/// Requests per pipeline in the warm-up and measured phases.
pub const PIPELINE_DEPTH: u64 = 1000;
/// Round trips each lane makes per turn in the interleaved latency phase.
pub const ROUND_TRIPS_PER_TURN: usize = 10;
/// PING keeps no state; a short warm-up just settles the connection and caches.
pub const PING_WARMUP: u64 = 10_000;
/// Requests each lane sends per turn in the paired CPU measurement: two pipelines, so that a
/// round of turns stays well under a second (`multi`'s split variants keep a 1 s key).
pub const PAIRED_TURN: u64 = 2 * PIPELINE_DEPTH;

pub struct Lane<'a> {
    pub variant: &'static Variant,
    pub workload: &'a Workload,
    pub con: Connection,
    pub sender: Sender<'a>,
    stream: Stream<'a>,
}

impl<'a> Lane<'a> {
    pub fn open(
        servers: &Servers,
        variant: &'static Variant,
        workload: &'a Workload,
        sha: &'a str,
    ) -> Result<Lane<'a>> {
        let server = servers
            .for_variant(variant)
            .ok_or_else(|| format!("{}: its server is not running", variant.name))?;
        Lane::on(server, variant, workload, sha)
    }

    /// As `open`, on `server`.
    pub fn on(
        server: &Server,
        variant: &'static Variant,
        workload: &'a Workload,
        sha: &'a str,
    ) -> Result<Lane<'a>> {
        Ok(Lane {
            variant,
            workload,
            con: server.connect_db(variant.index())?,
            sender: Sender::new(variant, workload, sha),
            stream: workload.stream(),
        })
    }

    /// One full window of requests (a short settling run for PING), so that stateful
    /// variants are measured in their steady state.
    fn warm_up_requests(&self) -> u64 {
        match self.variant.shape {
            Shape::Ping => PING_WARMUP,
            _ => self.workload.requests_per_window(),
        }
    }

    /// Sends the next `count` requests in pipelines of `depth`; returns how many were
    /// admitted where the replies say so.
    pub fn send_pipelined(&mut self, count: u64, depth: u64) -> Result<Option<u64>> {
        let mut pipe = Pipeline::with_capacity(depth as usize * 4);
        let mut admitted = None;
        let mut left = count;
        while left > 0 {
            let n = left.min(depth);
            pipe.clear();
            for req in self.stream.by_ref().take(n as usize) {
                self.sender.push(&mut pipe, req);
            }
            let replies: Vec<Value> = pipe.query(&mut self.con)?;
            if let Some(a) = self.sender.admitted(&replies) {
                admitted = Some(admitted.unwrap_or(0) + a);
            }
            left -= n;
        }
        Ok(admitted)
    }

    /// One request alone (pipeline depth 1): its round-trip time in µs.
    fn round_trip(&mut self, pipe: &mut Pipeline) -> Result<f64> {
        let req = self.stream.next().ok_or("request stream ended")?;
        pipe.clear();
        self.sender.push(pipe, req);
        let started = Instant::now();
        let _: Vec<Value> = pipe.query(&mut self.con)?;
        Ok(started.elapsed().as_secs_f64() * 1e6)
    }
}

/// Warms every lane up, one pipeline per lane per turn: every lane's keys are refreshed
/// throughout (their TTLs run on the server's clock) and no lane waits for the others'
/// whole warm-ups.
pub fn warm_up(lanes: &mut [Lane], settings: &mut Settings) -> Result<()> {
    let mut left: Vec<u64> = lanes.iter().map(Lane::warm_up_requests).collect();
    while left.iter().any(|&n| n > 0) {
        for (lane, left) in lanes.iter_mut().zip(&mut left) {
            let n = (*left).min(PIPELINE_DEPTH);
            if n == 0 {
                continue;
            }
            settings.apply(&mut lane.con, lane.variant)?;
            lane.send_pipelined(n, PIPELINE_DEPTH)?;
            *left -= n;
        }
    }
    Ok(())
}

/// `count` round-trip times (µs) per lane, sorted. The lanes take turns of
/// ROUND_TRIPS_PER_TURN, the first lane of each turn rotating, so that the machine's
/// hiccups and the cost of switching lanes fall on every variant alike.
pub fn round_trips(
    lanes: &mut [Lane],
    settings: &mut Settings,
    count: usize,
) -> Result<Vec<Vec<f64>>> {
    let mut samples: Vec<Vec<f64>> = lanes.iter().map(|_| Vec::with_capacity(count)).collect();
    let mut pipe = Pipeline::with_capacity(4);
    let mut turn = 0;
    while samples.iter().any(|s| s.len() < count) {
        for k in 0..lanes.len() {
            let i = (turn + k) % lanes.len();
            let n = ROUND_TRIPS_PER_TURN.min(count - samples[i].len());
            let lane = &mut lanes[i];
            settings.apply(&mut lane.con, lane.variant)?;
            for _ in 0..n {
                samples[i].push(lane.round_trip(&mut pipe)?);
            }
        }
        turn += 1;
    }
    for s in &mut samples {
        s.sort_by(f64::total_cmp);
    }
    Ok(samples)
}

/// What the server spent on some of one lane's requests: its CPU and the requests' commands'
/// in-command time, from the differences of `INFO cpu` and `INFO commandstats` around them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Spent {
    pub cpu_us: f64,
    pub in_command_us: f64,
}

impl Lane<'_> {
    /// Sends the next `count` requests in pipelines of `depth`, alone on the server, and returns
    /// what the server spent on them (and how many were admitted, where the replies say so).
    pub fn send_accounted(
        &mut self,
        settings: &mut Settings,
        count: u64,
        depth: u64,
    ) -> Result<(Spent, Option<u64>)> {
        settings.apply(&mut self.con, self.variant)?;
        let names = self.sender.stat_names();
        let before = info::command_stats(&mut self.con, names)?;
        let cpu_before = info::cpu_us(&mut self.con)?;
        let admitted = self.send_pipelined(count, depth)?;
        let cpu_after = info::cpu_us(&mut self.con)?;
        let after = info::command_stats(&mut self.con, names)?;
        if after.iter().zip(&before).any(|(a, b)| a.failed > b.failed) {
            return Err(format!("{} had failed calls", self.variant.name).into());
        }
        let usec: u64 = after
            .iter()
            .zip(&before)
            .map(|(a, b)| a.usec.saturating_sub(b.usec))
            .sum();
        let spent = Spent {
            cpu_us: cpu_after - cpu_before,
            in_command_us: usec as f64,
        };
        Ok((spent, admitted))
    }
}

/// Sends `count` more requests per lane in pipelines, the lanes taking turns of PAIRED_TURN
/// with the first of each turn rotating, and adds up what each turn cost the server. A turn is
/// one lane alone on the server, so its figures are that lane's; taking turns, a slower or
/// faster spell of the machine (other tenants, frequency) falls on every lane alike, which
/// compares variants far more steadily than batches run minutes apart.
pub fn paired(lanes: &mut [Lane], settings: &mut Settings, count: u64) -> Result<Vec<Spent>> {
    let mut totals = vec![Spent::default(); lanes.len()];
    let mut sent = vec![0u64; lanes.len()];
    let mut turn = 0;
    while sent.iter().any(|&s| s < count) {
        for k in 0..lanes.len() {
            let i = (turn + k) % lanes.len();
            let n = PAIRED_TURN.min(count - sent[i]);
            if n == 0 {
                continue;
            }
            let (spent, _) = lanes[i].send_accounted(settings, n, PIPELINE_DEPTH)?;
            totals[i].cpu_us += spent.cpu_us;
            totals[i].in_command_us += spent.in_command_us;
            sent[i] += n;
        }
        turn += 1;
    }
    Ok(totals)
}
