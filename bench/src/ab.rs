//! `BENCH_AB=a.so,b.so,...`: module builds side by side, each on a redis-server of its own, on
//! the workloads BENCH_ONLY names (`wide` without it). Every build's module lane and the seed
//! script's lane (on the first build's server) take turns as in the paired measurement, in
//! rounds: a slower spell of the machine falls on every build alike, so builds compare within
//! one run instead of across runs minutes apart. Naming one build twice shows the noise.
//! `BENCH_ONLY=vs-cell` runs the vs-cell table instead: every build against redis-cell.

use std::path::PathBuf;

use crate::Result;
use crate::info;
use crate::lanes::{self, Lane, PAIRED_TURN};
use crate::measure::MEASURED_REQUESTS;
use crate::paths;
use crate::server::Server;
use crate::settings::Settings;
use crate::variants::{self, LUA, MODULE};
use crate::vscell;
use crate::workload::{WORKLOADS, Workload};

/// Rounds of MEASURED_REQUESTS per lane, each reported on its own and then summed.
const ROUNDS: usize = 5;

pub fn run(builds: &str, only: Option<&str>) -> Result<()> {
    let paths: Vec<PathBuf> = builds
        .split(',')
        .map(std::fs::canonicalize)
        .collect::<std::io::Result<_>>()?;
    let first = paths.first().ok_or("BENCH_AB: no module named")?;
    if only == Some("vs-cell") {
        return vs_cell(&paths);
    }
    // One server per build, then the script's own (with the first build loaded).
    let servers: Vec<Server> = paths
        .iter()
        .chain(std::iter::once(first))
        .map(|p| Server::start(p))
        .collect::<Result<_>>()?;
    let script_server = servers.last().ok_or("no server")?;
    let sha = variants::load_script(&mut script_server.connect()?)?;
    // MODULE and LUA set no config: every lane runs with the startup values.
    let mut settings = Settings::read(&mut script_server.connect()?, &[])?;
    let names: Vec<&str> = only.map_or(vec!["wide"], |o| o.split(',').collect());
    for workload in WORKLOADS.iter().filter(|w| names.contains(&w.name)) {
        println!(
            "\n{}: {ROUNDS} rounds of {MEASURED_REQUESTS} requests per lane, turns of {PAIRED_TURN}",
            workload.name
        );
        compare(&servers, &paths, workload, &sha, &mut settings)?;
    }
    Ok(())
}

/// `BENCH_ONLY=vs-cell`: the vs-cell table with every build's compact lane and redis-cell's
/// taking turns, each on a server of its own.
fn vs_cell(paths: &[PathBuf]) -> Result<()> {
    let cell_path = paths::cell_module_path().ok_or("vs-cell: REDIS_CELL_MODULE not set")?;
    let servers: Vec<Server> = paths
        .iter()
        .map(|p| Server::start(p))
        .collect::<Result<_>>()?;
    let cell = Server::start(&cell_path)?;
    let builds: Vec<&Server> = servers.iter().collect();
    println!(
        "\nvs-cell: {} rounds of {} requests per lane",
        vscell::ROUNDS,
        vscell::ROUND_REQUESTS
    );
    let results = vscell::measure(&builds, &cell)?;
    for (path, rows) in paths.iter().zip(&results) {
        println!("{}", path.display());
        for r in rows {
            println!("  {}", vscell::line(r));
        }
    }
    Ok(())
}

/// One lane per build on its server, and the script's on the last server when it serves
/// `workload`.
fn compare(
    servers: &[Server],
    paths: &[PathBuf],
    workload: &Workload,
    sha: &str,
    settings: &mut Settings,
) -> Result<()> {
    let script = LUA.shape.serves(workload);
    let mut lanes = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let mut con = server.connect()?;
        redis::cmd("FLUSHALL").exec(&mut con)?;
        info::reset_stats(&mut con)?;
        if i < paths.len() {
            lanes.push(Lane::on(server, &MODULE, workload, sha)?);
        } else if script {
            lanes.push(Lane::on(server, &LUA, workload, sha)?);
        }
    }
    lanes::warm_up(&mut lanes, settings)?;
    let mut rounds: Vec<Vec<lanes::Spent>> = Vec::new();
    for _ in 0..ROUNDS {
        rounds.push(lanes::paired(&mut lanes, settings, MEASURED_REQUESTS)?);
    }
    let n = MEASURED_REQUESTS as f64;
    let total = |i: usize, f: fn(&lanes::Spent) -> f64| -> f64 {
        rounds.iter().filter_map(|r| r.get(i)).map(f).sum::<f64>() / (n * ROUNDS as f64)
    };
    let lua = script.then(|| total(paths.len(), |s| s.cpu_us));
    let labels: Vec<String> = paths
        .iter()
        .map(|p| p.display().to_string())
        .chain(script.then(|| "seed script".to_string()))
        .collect();
    for (i, label) in labels.iter().enumerate() {
        let per_round: Vec<String> = rounds
            .iter()
            .filter_map(|r| r.get(i))
            .map(|s| format!("{:.2}", s.cpu_us / n))
            .collect();
        let cpu = total(i, |s| s.cpu_us);
        let ratio = match lua {
            Some(l) if i < paths.len() => format!(", lua / it {:.3}", l / cpu),
            _ => String::new(),
        };
        println!(
            "  {label}: server CPU {cpu:.2} µs/req (rounds {}), in-command {:.2}{ratio}",
            per_round.join(" "),
            total(i, |s| s.in_command_us)
        );
    }
    // Keys idle past their TTL (a turn in every lane's) are rebuilt from empty: more than a few
    // and the lanes are no longer in their steady state (name fewer builds).
    for (server, label) in servers.iter().zip(&labels) {
        let expired = info::expired_keys(&mut server.connect()?)?;
        if expired > 0 {
            let note = match expired > workload.keys / 100 {
                true => ": not the steady state",
                false => "",
            };
            println!("  {label}: {expired} keys expired on the server's clock{note}");
        }
    }
    Ok(())
}
