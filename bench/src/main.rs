//! Benchmark: SLIDINGWINDOW.ALLOW against the seed's Lua script, its four commands sent plainly,
//! and PING, on three workloads with a simulated clock. Starts its own redis-server.

mod chart;
mod info;
mod json;
mod machine;
mod markdown;
mod measure;
mod members;
mod paths;
mod report;
mod server;
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

    let mut results = Vec::new();
    for workload in &workload::WORKLOADS {
        for variant in variants::Variant::ALL {
            let result = measure::run(&mut con, &sha, workload, variant)?;
            report::print_progress(&result);
            results.push(result);
        }
    }
    let worst = worst::run(&mut con, &sha)?;
    drop(server);

    let checks = targets::evaluate(&results, &worst);
    let run = report::Run {
        machine,
        results,
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
