//! `vs-cell` (issue 58): the compact storage against redis-cell's `CL.THROTTLE` on `hot`, `big`
//! and `wide`, each on a server of its own. Both lanes are warmed by a full window, then take
//! turns (lanes::paired) for ROUNDS rounds of ROUND_REQUESTS requests each, in pipelines of
//! PIPELINE_DEPTH; a round's figure is the server CPU a request (`INFO cpu` difference over the
//! round's turns, divided by its requests). Each side's figure is the median of its rounds, and
//! the ratio that of the two medians.

use redis::Connection;

use crate::Result;
use crate::info;
use crate::lanes::{self, Lane};
use crate::late::median;
use crate::server::{Server, Servers};
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
#[derive(Clone)]
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

/// Every workload of NAMES on the module's server; empty when redis-cell's is not running.
pub fn run(servers: &Servers) -> Result<Vec<VsCell>> {
    let Some(cell) = servers.cell.as_ref() else {
        return Ok(Vec::new());
    };
    let per_build = measure(&[&servers.main], cell)?;
    Ok(per_build.into_iter().flatten().collect())
}

/// Every workload of NAMES with each of `builds` (a server each) and redis-cell's server taking
/// turns: for each build, its figures per workload, in NAMES order. The builds' servers create
/// keys in the compact storage meanwhile, and keep the storage they had after.
pub fn measure(builds: &[&Server], cell: &Server) -> Result<Vec<Vec<VsCell>>> {
    let mut cons: Vec<Connection> = builds.iter().map(|b| b.connect()).collect::<Result<_>>()?;
    let mut startup = Vec::new();
    for con in &mut cons {
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(STORAGE).query(con)?;
        startup.push(
            pair.get(1)
                .cloned()
                .ok_or("CONFIG GET: no storage config")?,
        );
        set_storage(con, "compact")?;
    }
    let measured = measure_each(builds, cell);
    for (con, value) in cons.iter_mut().zip(&startup) {
        set_storage(con, value)?;
    }
    let by_workload = measured?;
    // From one list per workload (every build's) to one list per build (every workload's).
    Ok((0..builds.len())
        .map(|b| {
            by_workload
                .iter()
                .filter_map(|w| w.get(b).cloned())
                .collect()
        })
        .collect())
}

const STORAGE: &str = "slidingwindow.storage";

fn set_storage(con: &mut Connection, value: &str) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(STORAGE)
        .arg(value)
        .exec(con)?;
    Ok(())
}

/// For each workload of NAMES, every build's figures.
fn measure_each(builds: &[&Server], cell: &Server) -> Result<Vec<Vec<VsCell>>> {
    // The storage is set on each build's server for the whole run: no lane switches configs.
    let mut settings = Settings::none();
    let mut results = Vec::new();
    for name in NAMES {
        let workload = WORKLOADS
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| format!("vs-cell: no workload {name}"))?;
        let mut lanes = Vec::new();
        for server in builds.iter().copied().chain([cell]) {
            let variant = if std::ptr::eq(server, cell) {
                &CELL
            } else {
                &COMPACT
            };
            lanes.push(Lane::on(server, variant, workload, "")?);
        }
        for lane in &mut lanes {
            redis::cmd("FLUSHALL").exec(&mut lane.con)?;
            info::reset_stats(&mut lane.con)?;
        }
        lanes::warm_up(&mut lanes, &mut settings)?;
        // Expired keys are counted over the measured rounds only.
        for lane in &mut lanes {
            info::reset_stats(&mut lane.con)?;
        }
        let n = ROUND_REQUESTS as f64;
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
        for _ in 0..ROUNDS {
            let spent = lanes::paired(&mut lanes, &mut settings, ROUND_REQUESTS)?;
            for (round, s) in cpu.iter_mut().zip(&spent) {
                round.push(s.cpu_us / n);
            }
        }
        let cell_us = cpu.pop().unwrap_or_default();
        let mut per_build = Vec::new();
        for (lane, compact_us) in lanes.iter_mut().zip(cpu) {
            // Compact keys idle past their TTL while the other lanes ran were rebuilt from empty
            // in the rounds: more than a few and the figures are not the steady state's.
            let expired = info::expired_keys(&mut lane.con)?;
            if expired > workload.keys / 100 {
                return Err(format!(
                    "vs-cell: {expired} compact keys on `{name}` expired on the server's clock \
                     (is the machine busy?)"
                )
                .into());
            }
            let result = VsCell {
                workload: workload.name,
                compact_us,
                cell_us: cell_us.clone(),
            };
            println!("  {}", line(&result));
            per_build.push(result);
        }
        results.push(per_build);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn result(workload: &'static str, compact_us: &[f64], cell_us: &[f64]) -> VsCell {
        VsCell {
            workload,
            compact_us: compact_us.to_vec(),
            cell_us: cell_us.to_vec(),
        }
    }

    #[test]
    fn the_ratio_is_of_the_medians() {
        let r = result("hot", &[1.0, 3.0, 1.2], &[2.0, 1.5, 9.0]);
        assert_eq!(r.compact(), 1.2);
        assert_eq!(r.cell(), 2.0);
        assert_eq!(r.ratio(), 0.6);
        assert_eq!(row(&r), ["hot", "1.20", "2.00", "0.600"]);
    }

    #[test]
    fn a_check_per_workload_unavailable_when_not_measured() {
        let measured = [result("hot", &[0.7], &[1.0]), result("big", &[0.9], &[1.0])];
        let checks = checks(&measured, true);
        let holds: Vec<(bool, bool)> = checks
            .iter()
            .map(|c| (c.holds, c.unavailable.is_some()))
            .collect();
        assert_eq!(holds, [(true, false), (false, false), (false, true)]);
        let without_cell = checks_unavailable_reasons(&super::checks(&[], false));
        assert_eq!(without_cell, ["redis-cell not built"; 3]);
    }

    fn checks_unavailable_reasons(checks: &[Check]) -> Vec<String> {
        checks
            .iter()
            .filter_map(|c| c.unavailable.clone())
            .collect()
    }
}
