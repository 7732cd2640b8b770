//! `vs-cell` (issue 58): the compact storage against redis-cell's `CL.THROTTLE` on `hot`, `big`
//! and `wide`, each on a server of its own. Both lanes are warmed by a full window, then take
//! turns (lanes::paired) for ROUNDS rounds of ROUND_REQUESTS requests each, in pipelines of
//! PIPELINE_DEPTH; a round's figure is the server CPU a request (`INFO cpu` difference over the
//! round's turns, divided by its requests). Each side's figure is the median of its rounds, and
//! the ratio that of the two medians.

use crate::Result;
use crate::info;
use crate::lanes::{self, Lane};
use crate::late::median;
use crate::server::Servers;
use crate::settings::Settings;
use crate::targets::{Bound, Check};
use crate::variants::{CELL, COMPACT};
use crate::workload::WORKLOADS;

/// The workloads compared, in table order.
pub const NAMES: [&str; 3] = ["hot", "big", "wide"];
pub const ROUNDS: usize = 3;
/// Requests each lane sends in a round.
pub const ROUND_REQUESTS: u64 = 100_000;
/// Issue 58's target: compact / redis-cell server CPU a request, on every workload.
const TARGET: f64 = 0.80;

/// One workload's figures: server CPU µs a request of each side in each round.
pub struct VsCell {
    pub workload: &'static str,
    pub compact_us: Vec<f64>,
    pub cell_us: Vec<f64>,
}

impl VsCell {
    /// The compact storage's median over the rounds.
    pub fn compact(&self) -> f64 {
        median(self.compact_us.clone())
    }

    /// redis-cell's median over the rounds.
    pub fn cell(&self) -> f64 {
        median(self.cell_us.clone())
    }

    /// The compact storage's median over redis-cell's.
    pub fn ratio(&self) -> f64 {
        self.compact() / self.cell()
    }
}

/// Every workload of NAMES; empty when redis-cell's server is not running.
pub fn run(servers: &Servers, sha: &str, settings: &mut Settings) -> Result<Vec<VsCell>> {
    if servers.cell.is_none() {
        return Ok(Vec::new());
    }
    let mut results = Vec::new();
    for name in NAMES {
        let workload = WORKLOADS
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| format!("vs-cell: no workload {name}"))?;
        let mut lanes = vec![
            Lane::open(servers, &COMPACT, workload, sha)?,
            Lane::open(servers, &CELL, workload, sha)?,
        ];
        for lane in &mut lanes {
            redis::cmd("FLUSHALL").exec(&mut lane.con)?;
            info::reset_stats(&mut lane.con)?;
        }
        lanes::warm_up(&mut lanes, settings)?;
        let n = ROUND_REQUESTS as f64;
        let mut result = VsCell {
            workload: workload.name,
            compact_us: Vec::new(),
            cell_us: Vec::new(),
        };
        for _ in 0..ROUNDS {
            let spent = lanes::paired(&mut lanes, settings, ROUND_REQUESTS)?;
            result.compact_us.push(spent[0].cpu_us / n);
            result.cell_us.push(spent[1].cpu_us / n);
        }
        // The compact keys idle past their TTL while redis-cell's lane runs are rebuilt from
        // empty: more than a few and the figures are not the steady state's.
        let expired = info::expired_keys(&mut lanes[0].con)?;
        if expired > workload.keys / 100 {
            return Err(format!(
                "vs-cell: {expired} compact keys on `{}` expired on the server's clock (is the \
                 machine busy?)",
                workload.name
            )
            .into());
        }
        println!("  {}", line(&result));
        results.push(result);
    }
    Ok(results)
}

/// `hot: compact 1.20 µs (1.19 1.20 1.22), redis-cell 1.50 µs (...), ratio 0.80`
pub fn line(r: &VsCell) -> String {
    let rounds = |v: &[f64]| {
        let parts: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
        parts.join(" ")
    };
    format!(
        "{}: compact {:.2} µs (rounds {}), redis-cell {:.2} µs (rounds {}), ratio {:.3}",
        r.workload,
        r.compact(),
        rounds(&r.compact_us),
        r.cell(),
        rounds(&r.cell_us),
        r.ratio()
    )
}

pub const HEADER: [&str; 4] = [
    "workload",
    "compact server CPU µs/req",
    "redis-cell server CPU µs/req",
    "compact / redis-cell",
];

pub fn row(r: &VsCell) -> Vec<String> {
    vec![
        r.workload.to_string(),
        format!("{:.2}", r.compact()),
        format!("{:.2}", r.cell()),
        format!("{:.3}", r.ratio()),
    ]
}

/// Issue 58's target on each workload: unavailable when redis-cell was not built or the part
/// did not run.
pub fn checks(results: &[VsCell], cell: bool) -> Vec<Check> {
    NAMES
        .iter()
        .map(|workload| {
            let name = format!(
                "server CPU/request, compact / redis-cell, vs-cell (medians of {ROUNDS} rounds), \
                 {workload}"
            );
            match results.iter().find(|r| r.workload == *workload) {
                Some(r) => Check::new(name, r.ratio(), Bound::AtMost, TARGET),
                None if !cell => {
                    Check::unavailable(name, Bound::AtMost, TARGET, "redis-cell not built")
                }
                None => Check::unavailable(name, Bound::AtMost, TARGET, "vs-cell did not run"),
            }
        })
        .collect()
}

/// The table's description in docs/bench.md.
pub fn method() -> String {
    format!(
        "`vs-cell`: the compact storage against redis-cell's `CL.THROTTLE` on {}, each on a \
         server of its own, warmed by a full window, then taking turns of {} requests for {ROUNDS} \
         rounds of {ROUND_REQUESTS} requests each, in pipelines of {}; server CPU a request from \
         `INFO cpu`, the median of the rounds, and the ratio of the medians.",
        NAMES.join(", "),
        lanes::PAIRED_TURN,
        lanes::PIPELINE_DEPTH
    )
}
