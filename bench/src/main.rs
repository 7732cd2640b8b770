//! Benchmark: SLIDINGWINDOW.ALLOW (and ALLOWALL) against the seed's Lua script, its four
//! commands sent plainly, PING and redis-cell's CL.THROTTLE (the variants in variants::ALL), on
//! the workloads of workload::WORKLOADS with a simulated clock; then module and PING on `hot` at
//! several pipeline depths, the worst expiry, late callers on a 2M-request log, REFUND, ALLOW
//! with LEASE against ALLOW without it, and the compact log's block edges, block openings,
//! RESTOREs and bytes after removals (`churn`); last the compact storage against redis-cell
//! taking turns (`vs-cell`).
//! Starts its own redis-server (and one for redis-cell). `BENCH_AB=a.so,b.so` compares module
//! builds instead (see `ab`); `BENCH_MEMORY=1` measures memory instead (see `memory`), `BENCH_TOP=1`
//! SLIDINGWINDOW.TOP's accuracy (see `top`).

mod ab;
mod chart;
mod churn;
mod coarse;
mod depth;
mod info;
mod json;
mod lanes;
mod late;
mod lease;
mod machine;
mod markdown;
mod measure;
mod members;
mod memory;
mod paths;
mod refund;
mod report;
mod server;
mod settings;
mod targets;
mod top;
mod variants;
mod vscell;
mod workload;
mod worst;

use std::time::Instant;

/// One error type for the whole program: every failure ends the run with its message.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let started = Instant::now();
    if let Ok(builds) = std::env::var("BENCH_AB") {
        return ab::run(&builds, std::env::var("BENCH_ONLY").ok().as_deref());
    }
    let module = paths::module_path()?;
    println!("module: {}", module.display());
    if std::env::var_os("BENCH_TOP").is_some() {
        return top::run(&server::Server::start(&module)?);
    }
    if std::env::var_os("BENCH_MEMORY").is_some() {
        let main = server::Server::start(&module)?;
        return memory::run(&main, start_cell().as_ref());
    }
    let servers = server::Servers::new(server::Server::start(&module)?, start_cell())?;
    if !servers.allowall {
        println!("SLIDINGWINDOW.ALLOWALL: unknown to this module; `tenant` runs without it");
    }
    let mut con = servers.main.connect()?;
    let sha = variants::load_script(&mut con)?;
    let machine = machine::Machine::probe(&mut con)?;
    info::track_latency(&mut con)?;
    let mut settings = settings::Settings::read(&mut con, &variants::ALL)?;

    let mut results = Vec::new();
    // BENCH_ONLY=hot,late (say) runs only the named parts, for trying changes quickly; the
    // report and the docs it writes then lack the rest.
    let only = std::env::var("BENCH_ONLY").ok();
    let runs = |part: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|p| p == part))
    };
    for workload in workload::WORKLOADS.iter().filter(|w| runs(w.name)) {
        for result in measure::run(&servers, &sha, workload, &mut settings)? {
            report::print_progress(&result);
            results.push(result);
        }
    }
    let depths = if runs("depth") {
        sweep_depths(&servers, &sha, &mut settings)?
    } else {
        Vec::new()
    };
    let worst = if runs("worst") {
        worst::run(&mut con, &sha)?
    } else {
        worst::Worst::default()
    };
    let late = if runs("late") {
        late::run(&mut con)?
    } else {
        Vec::new()
    };
    let refund = if !runs("refund") {
        None
    } else if servers.refund {
        Some(refund::run(&mut con)?)
    } else {
        println!("SLIDINGWINDOW.REFUND: unknown to this module; its figures are unavailable");
        None
    };
    let lease = if runs("lease") {
        lease::run(&mut con)?
    } else {
        Vec::new()
    };
    let churn = if runs("churn") {
        Some(churn::run(&mut con)?)
    } else {
        None
    };
    let vs_cell = if runs("vs-cell") {
        println!("vs-cell:");
        vscell::run(&servers)?
    } else {
        Vec::new()
    };
    let available = targets::Available {
        cell: servers.cell.is_some(),
        allowall: servers.allowall,
    };
    drop(servers);

    let mut checks = targets::evaluate(
        &results,
        &worst,
        &late,
        refund.as_deref(),
        churn.as_ref(),
        available,
    );
    checks.extend(targets::lease_checks(&lease));
    checks.extend(vscell::checks(&vs_cell, available.cell));
    let run = report::Run {
        machine,
        results,
        depths,
        worst,
        late,
        refund,
        lease,
        churn,
        vs_cell,
        checks,
        seconds: started.elapsed().as_secs_f64(),
        load_at_end: machine::load_average(),
    };
    report::print(&run);
    if only.is_some() {
        println!("BENCH_ONLY set: a partial run, docs/bench.* left as they are");
        return Ok(());
    }
    let docs = paths::docs_dir()?;
    json::write(&run, &docs.join("bench.json"))?;
    markdown::write(&run, &docs.join("bench.md"))?;
    chart::write_svg(&run.results, &docs.join("bench.svg"))?;
    println!("wrote {}/bench.{{json,md,svg}}", docs.display());
    Ok(())
}

/// redis-cell's server, if its module was built (scripts/redis-cell.sh) and loads.
fn start_cell() -> Option<server::Server> {
    let Some(path) = paths::cell_module_path() else {
        println!("redis-cell: REDIS_CELL_MODULE not set or not a file; its rows are skipped");
        return None;
    };
    match server::Server::start(&path) {
        Ok(server) => {
            println!("redis-cell: {}", path.display());
            Some(server)
        }
        Err(e) => {
            println!("redis-cell: cannot start a server with it ({e}); its rows are skipped");
            None
        }
    }
}

fn sweep_depths(
    servers: &server::Servers,
    sha: &str,
    settings: &mut settings::Settings,
) -> Result<Vec<depth::DepthPoint>> {
    let mut sweep = depth::Sweep::start(servers, sha, settings)?;
    let mut points = Vec::new();
    for step in &depth::STEPS {
        let point = sweep.measure(step, settings)?;
        report::print_depth(&point);
        points.push(point);
    }
    Ok(points)
}
