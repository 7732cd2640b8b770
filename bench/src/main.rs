//! Benchmark: SLIDINGWINDOW.ALLOW against the seed's Lua script, its four commands sent plainly,
//! and PING (the variants in variants::ALL), on three workloads with a simulated clock; then
//! module and PING on `hot` at several pipeline depths. Starts its own redis-server.

mod chart;
mod depth;
mod info;
mod json;
mod lanes;
mod machine;
mod markdown;
mod measure;
mod members;
mod paths;
mod report;
mod server;
mod settings;
mod targets;
mod variants;
mod workload;
mod worst;

use std::time::Instant;

/// One error type for the whole program: every failure ends the run with its message.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let started = Instant::now();
    let module = paths::module_path()?;
    println!("module: {}", module.display());
    let server = server::Server::start(&module)?;
    let mut con = server.connect()?;
    let sha = variants::load_script(&mut con)?;
    let machine = machine::Machine::probe(&mut con)?;
    info::track_latency(&mut con)?;
    let mut settings = settings::Settings::read(&mut con, &variants::ALL)?;

    let mut results = Vec::new();
    for workload in &workload::WORKLOADS {
        for result in measure::run(&server, &sha, workload, &mut settings)? {
            report::print_progress(&result);
            results.push(result);
        }
    }
    let depths = sweep_depths(&server, &sha, &mut settings)?;
    let worst = worst::run(&mut con, &sha)?;
    drop(server);

    let checks = targets::evaluate(&results, &worst);
    let run = report::Run {
        machine,
        results,
        depths,
        worst,
        checks,
        seconds: started.elapsed().as_secs_f64(),
    };
    report::print(&run);
    let docs = paths::docs_dir()?;
    json::write(&run, &docs.join("bench.json"))?;
    markdown::write(&run, &docs.join("bench.md"))?;
    chart::write_svg(&run.results, &docs.join("bench.svg"))?;
    println!("wrote {}/bench.{{json,md,svg}}", docs.display());
    Ok(())
}

fn sweep_depths(
    server: &server::Server,
    sha: &str,
    settings: &mut settings::Settings,
) -> Result<Vec<depth::DepthPoint>> {
    let mut sweep = depth::Sweep::start(server, sha, settings)?;
    let mut points = Vec::new();
    for step in &depth::STEPS {
        let point = sweep.measure(step, settings)?;
        report::print_depth(&point);
        points.push(point);
    }
    Ok(points)
}
