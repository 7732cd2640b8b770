//! The results as a stdout table, JSON and Markdown.

use std::path::Path;

use serde_json::{Value, json};

use crate::Result;
use crate::machine::Machine;
use crate::measure::{LATENCY_REQUESTS, MEASURED_REQUESTS, Measurement, PIPELINE_DEPTH};
use crate::targets::{Bound, Check};
use crate::workload::WORKLOADS;
use crate::worst::Worst;

pub struct Run {
    pub machine: Machine,
    pub results: Vec<Measurement>,
    pub worst: Worst,
    pub checks: Vec<Check>,
    pub seconds: f64,
}

const HEADER: [&str; 10] = [
    "workload",
    "variant",
    "server CPU µs/req",
    "in-command µs/call",
    "throughput req/s",
    "p50 µs",
    "p99 µs",
    "members/key",
    "bytes/member",
    "admitted",
];

fn row(m: &Measurement) -> Vec<String> {
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_string(),
    };
    vec![
        m.workload.to_string(),
        m.variant.name().to_string(),
        format!("{:.2}", m.cpu_us_per_req),
        format!("{:.2}", m.in_command_us_per_req),
        format!("{:.0}", m.throughput_rps),
        format!("{:.1}", m.p50_us),
        format!("{:.1}", m.p99_us),
        opt(m.memory.as_ref().map(|mem| mem.members_per_key), 1),
        opt(m.memory.as_ref().map(|mem| mem.bytes_per_member), 1),
        match m.admitted {
            Some(a) => format!("{:.1}%", a * 100.0),
            None => "-".to_string(),
        },
    ]
}

pub fn print_progress(m: &Measurement) {
    println!(
        "  {:<5} {:<9} cpu {:>6.2} µs/req  in-command {:>6.2} µs/call  {:>8.0} req/s",
        m.workload,
        m.variant.name(),
        m.cpu_us_per_req,
        m.in_command_us_per_req,
        m.throughput_rps
    );
}

pub fn print(run: &Run) {
    let rows: Vec<Vec<String>> = run.results.iter().map(row).collect();
    println!();
    print!("{}", text_table(&HEADER, &rows));
    println!();
    println!("{}", worst_line(&run.worst));
    println!();
    for check in &run.checks {
        println!("{}", check_line(check));
    }
    let held = run.checks.iter().filter(|c| c.holds).count();
    println!(
        "\n{held}/{} targets hold; run took {:.1} s",
        run.checks.len(),
        run.seconds
    );
}

fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        padded.join("  ") + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out += &line(r.iter().map(String::as_str).collect());
    }
    out
}

fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out += &format!("|{}\n", "---|".repeat(header.len()));
    for r in rows {
        out += &format!("| {} |\n", r.join(" | "));
    }
    out
}

fn worst_line(worst: &Worst) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "Worst call (one request on {} members whose whole window has expired), in-command \
         time: module median {:.3} ms, worst {:.3} ms; lua median {:.1} ms, worst {:.1} ms \
         (µs per trial: module {:?}, lua {:?})",
        worst.members,
        ms(worst.module_median()),
        ms(worst.module_max()),
        ms(worst.lua_median()),
        ms(worst.lua_max()),
        worst.module_us,
        worst.lua_us
    )
}

fn check_line(check: &Check) -> String {
    let op = match check.bound {
        Bound::AtLeast => ">=",
        Bound::AtMost => "<=",
    };
    format!(
        "[{}] {}: {:.3} (target {op} {})",
        if check.holds { "ok" } else { "MISSED" },
        check.name,
        check.value,
        check.threshold
    )
}

pub fn write_json(run: &Run, path: &Path) -> Result<()> {
    let doc = json!({
        "machine": {
            "nproc": run.machine.nproc,
            "cpu_model": run.machine.cpu_model,
            "redis_version": run.machine.redis_version,
            "date": run.machine.date,
            "load_average_at_start": run.machine.load_at_start,
        },
        "run_seconds": run.seconds,
        "config": config_json(),
        "results": run.results.iter().map(result_json).collect::<Vec<_>>(),
        "worst_call": {
            "members": run.worst.members,
            "module_in_command_us": run.worst.module_us,
            "lua_in_command_us": run.worst.lua_us,
        },
        "targets": run.checks.iter().map(check_json).collect::<Vec<_>>(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(())
}

fn config_json() -> Value {
    json!({
        "measured_requests": MEASURED_REQUESTS,
        "pipeline_depth": PIPELINE_DEPTH,
        "latency_requests": LATENCY_REQUESTS,
        "workloads": WORKLOADS.iter().map(|w| json!({
            "name": w.name,
            "keys": w.keys,
            "window_s": w.window_s,
            "max": w.max,
            "ms_per_request": w.step_num as f64 / w.step_den as f64,
            "warmup_requests": w.requests_per_window(),
        })).collect::<Vec<_>>(),
    })
}

fn result_json(m: &Measurement) -> Value {
    json!({
        "workload": m.workload,
        "variant": m.variant.name(),
        "server_cpu_us_per_request": m.cpu_us_per_req,
        "in_command_us_per_call": m.in_command_us_per_req,
        "throughput_rps": m.throughput_rps,
        "p50_us": m.p50_us,
        "p99_us": m.p99_us,
        "members_per_key": m.memory.as_ref().map(|mem| mem.members_per_key),
        "bytes_per_member": m.memory.as_ref().map(|mem| mem.bytes_per_member),
        "admitted_fraction": m.admitted,
    })
}

fn check_json(c: &Check) -> Value {
    json!({
        "name": c.name,
        // NaN is not JSON: a missing figure becomes null.
        "value": if c.value.is_finite() { Some(c.value) } else { None },
        "bound": match c.bound { Bound::AtLeast => ">=", Bound::AtMost => "<=" },
        "threshold": c.threshold,
        "holds": c.holds,
    })
}

pub fn write_markdown(run: &Run, path: &Path) -> Result<()> {
    let m = &run.machine;
    let rows: Vec<Vec<String>> = run.results.iter().map(row).collect();
    let mut out =
        String::from("# Benchmark: SLIDINGWINDOW.ALLOW against the seed's Lua script\n\n");
    out += &format!(
        "Ran {} on {} CPUs ({}), redis-server {}, 1-minute load average {} at the start; \
         the whole run took {:.0} s. Regenerate with `make bench`.\n\n",
        m.date, m.nproc, m.cpu_model, m.redis_version, m.load_at_start, run.seconds
    );
    out += &method_text();
    out += &markdown_table(&HEADER, &rows);
    out += &format!("\n{}.\n\n", worst_line(&run.worst));
    out += "## Targets\n\n";
    for check in &run.checks {
        out += &format!("- {}\n", check_line(check));
    }
    out += "\n![server CPU per request](bench.svg)\n";
    std::fs::write(path, out)?;
    Ok(())
}

fn method_text() -> String {
    format!(
        "Each workload runs for each variant on one private server, one after the other, with a \
         simulated clock (the client sends `now`) after one full window of warm-up. Server CPU is \
         the `INFO cpu` delta over {MEASURED_REQUESTS} requests sent in pipelines of \
         {PIPELINE_DEPTH} requests; in-command time is from `INFO commandstats` (for `commands`, the four \
         commands' usec summed per request); latency is over {LATENCY_REQUESTS} sequential round \
         trips; bytes/member is `MEMORY USAGE key SAMPLES 0` / `ZCARD`. `commands` (the script's \
         four commands, pipelined, always adding) and `ping` are cost floors, not rate limiters.\n\n"
    )
}
