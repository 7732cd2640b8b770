//! The human-readable results: docs/bench.md, the table and the machine it ran on.

use std::path::Path;

use crate::Result;
use crate::depth;
use crate::measure::{LATENCY_REQUESTS, MEASURED_REQUESTS, PIPELINE_DEPTH};
use crate::report::{DEPTH_HEADER, HEADER, Run, check_line, depth_row, row, worst_line};

pub fn write(run: &Run, path: &Path) -> Result<()> {
    let rows: Vec<Vec<String>> = run.results.iter().map(row).collect();
    let mut out =
        String::from("# Benchmark: SLIDINGWINDOW.ALLOW against the seed's Lua script\n\n");
    out += &machine_text(run);
    out += &method_text();
    out += &markdown_table(&HEADER, &rows);
    out += &format!("\n{}.\n\n", worst_line(&run.worst));
    out += &targets_text(run);
    out += "\n![server CPU per request by variant and workload](bench.svg)\n";
    out += &depth_text(run);
    std::fs::write(path, out)?;
    Ok(())
}

fn machine_text(run: &Run) -> String {
    let m = &run.machine;
    format!(
        "Latest run (`make bench`), {}, took {:.0} s on:\n\n\
         - `nproc`: {}\n\
         - CPU: {}\n\
         - redis-server {}\n\
         - 1-minute load average at the start: {} (other work on the machine skews the figures)\n\n",
        m.date, run.seconds, m.nproc, m.cpu_model, m.redis_version, m.load_at_start
    )
}

fn targets_text(run: &Run) -> String {
    let held = run.checks.iter().filter(|c| c.holds).count();
    let mut out = format!("## Targets: {held} of {} hold\n\n", run.checks.len());
    for check in &run.checks {
        out += &format!("- {}\n", check_line(check));
    }
    out
}

fn method_text() -> String {
    format!(
        "Each workload runs for each variant on one private server, one after the other, with a \
         simulated clock (the client sends `now`) after one full window of warm-up. Server CPU is \
         the `INFO cpu` delta over {MEASURED_REQUESTS} requests sent in pipelines of \
         {PIPELINE_DEPTH} requests; in-command time is from `INFO commandstats` (for `commands`, the four \
         commands' usec summed per request); latency is over {LATENCY_REQUESTS} sequential round \
         trips; bytes/member is `MEMORY USAGE key SAMPLES 0` / `ZCARD`. `commands` (the script's \
         four commands, pipelined, always adding) and `ping` are cost floors, not rate limiters. \
         Identical sets differ by a fraction of a byte per member, as skiplist node heights are \
         random.\n\n"
    )
}

fn depth_text(run: &Run) -> String {
    let counts: Vec<String> = depth::STEPS
        .iter()
        .map(|s| format!("{} at depth {}", s.requests, s.depth))
        .collect();
    let rows: Vec<Vec<String>> = run.depths.iter().map(depth_row).collect();
    let mut out = format!(
        "\n## Pipeline depth sweep: module and ping on `{}`\n\n\
         Server CPU per request (the `INFO cpu` delta, as in the table above) of the module and of \
         PING at several pipeline depths, on one key warmed by a full window, with the simulated \
         clock running on from one depth to the next; module then PING at each depth. Requests: \
         {}. What a round trip costs the server (reading, parsing, replying, waking the event \
         loop) is shared by the requests of one pipeline, and is most of PING's cost, so the \
         module/ping ratio depends on the depth; the target above is checked at the table's \
         depth ({PIPELINE_DEPTH}). At low depths both figures are mostly that per-round-trip \
         cost, which varies from run to run with the machine's load: compare module and ping \
         within one run.\n\n",
        depth::WORKLOAD,
        counts.join(", ")
    );
    out += &markdown_table(&DEPTH_HEADER, &rows);
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
